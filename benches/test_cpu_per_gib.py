"""Host-side checks of benches/cpu-per-gib's figures (make lint; no lane needed): how a profile
sample is tagged and classified (ours or the NIC's), and that the summary recomputes the figure
from the log's lines alone. The call chains are the lane's (docs/perf/engine-profile-graph-*).
Run: python3 -m unittest benches/test_cpu_per_gib.py"""

from __future__ import annotations

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_summary as s  # noqa: E402

# Kernel call chains, innermost first, as the lane's profiles show them.
ICRC_IN_KSOFTIRQD = ["crc32_body", "crc32_update", "rxe_crc32.isra.0", "rxe_icrc_check", "rxe_rcv",
                     "rxe_udp_encap_recv", "udp_queue_rcv_one_skb", "udp_unicast_rcv_skb",
                     "__udp4_lib_rcv", "ip_protocol_deliver_rcu", "ip_local_deliver_finish",
                     "__netif_receive_skb_one_core", "process_backlog", "__napi_poll",
                     "net_rx_action", "handle_softirqs", "run_ksoftirqd", "smpboot_thread_fn",
                     "kthread", "ret_from_fork"]
POST_SEND = ["memcpy", "rxe_mr_copy", "rxe_requester", "rxe_do_task", "rxe_post_send",
             "ib_uverbs_post_send", "ib_uverbs_write", "vfs_write", "ksys_write", "do_syscall_64"]
FILE_READ = ["copy_user_generic_string", "_copy_to_iter", "copy_page_to_iter",
             "shmem_file_read_iter", "vfs_read", "__x64_sys_pread64", "do_syscall_64"]
PIN = ["pin_user_pages_fast", "ib_umem_get", "rxe_mr_init_user", "rxe_reg_user_mr",
       "ib_uverbs_reg_mr", "ib_uverbs_write", "vfs_write", "do_syscall_64"]
TCP_SEND = ["veth_xmit", "dev_hard_start_xmit", "__dev_queue_xmit", "ip_finish_output2",
            "__ip_queue_xmit", "__tcp_transmit_skb", "tcp_write_xmit", "tcp_sendmsg", "sock_write_iter"]
IP_RECEIVE = ["ip_rcv_core", "ip_rcv", "__netif_receive_skb_one_core", "process_backlog",
              "__napi_poll", "net_rx_action", "handle_softirqs", "do_idle"]


class TagTest(unittest.TestCase):
    def test_chains_get_their_subsystems(self):
        self.assertEqual(s.cpu_tags(ICRC_IN_KSOFTIRQD), "rxe,udp,netrx")
        self.assertEqual(s.cpu_tags(FILE_READ), "file")
        self.assertEqual(s.cpu_tags(PIN), "umem,rxe,file")
        self.assertEqual(s.cpu_tags(TCP_SEND), "tcp,xmit,veth")
        self.assertEqual(s.cpu_tags([]), "user")
        self.assertEqual(s.cpu_tags(["clear_page_rep", "get_page_from_freelist"]), "kernel")


class ClassTest(unittest.TestCase):
    def test_rxe_anywhere_is_the_nic(self):
        for role in ("client", "server", "idle", "other"):
            self.assertEqual(s.cpu_class(role, s.cpu_tags(ICRC_IN_KSOFTIRQD)), "nic", role)
        # rxe's requester runs inside our write(2) of a post_send: still the NIC's work
        self.assertEqual(s.cpu_class("client", s.cpu_tags(POST_SEND)), "nic")

    def test_our_syscalls_and_user_space_are_ours(self):
        self.assertEqual(s.cpu_class("server", s.cpu_tags(FILE_READ)), "server")
        self.assertEqual(s.cpu_class("client", "user"), "client")
        # pinning a registration's pages: the host's work with any NIC, though rxe is on the chain
        self.assertEqual(s.cpu_class("client", s.cpu_tags(PIN)), "client")

    def test_tcp_is_ours_the_bare_packet_stack_the_nics(self):
        self.assertEqual(s.cpu_class("client", s.cpu_tags(TCP_SEND)), "client")
        self.assertEqual(s.cpu_class("idle", "tcp,netrx"), "kernel")
        self.assertEqual(s.cpu_class("idle", s.cpu_tags(IP_RECEIVE)), "nic")

    def test_the_rest_is_nobodys(self):
        self.assertEqual(s.cpu_class("idle", "idle"), "idle")
        self.assertEqual(s.cpu_class("other", "file"), "other")


PERF_SCRIPT = """\
hipobj-rdma-01  310/312    2004008 
\tffffffff8150 crc32_body
\tffffffff8151 rxe_crc32.isra.0

tokio-rt-worker 77/80    4008016 

swapper     0/0        2004008 
\tffffffff8224 pv_native_safe_halt
\tffffffff8225 do_idle
"""


class PerfScriptTest(unittest.TestCase):
    def test_samples_with_and_without_kernel_chains(self):
        got = list(s.perf_script_samples(PERF_SCRIPT.splitlines(keepends=True)))
        self.assertEqual(got, [(310, "hipobj-rdma-01", 2004008, ["crc32_body", "rxe_crc32.isra.0"]),
                               (77, "tokio-rt-worker", 4008016, []),
                               (0, "swapper", 2004008, ["pv_native_safe_halt", "do_idle"])])


GIB_MB = s.GIB / 1e6  # memcpy at 1 GiB/s


def transfer_lines(rnd: int, client_ns: int, nic_ns: int, server_ns: int) -> str:
    """One GiB GET of the rdma path: the client's user time, the NIC's work in ksoftirqd, the
    server's file reads, and idle time that counts for nobody."""
    tag = f"{rnd} rdma get"
    return (f"transfer {tag} {s.GIB} 10.000 {client_ns / 1e9} {server_ns / 1e9} | closing line\n"
            f"prof {tag} client hipobj-engine-N user {client_ns} 9\n"
            f"prof {tag} other ksoftirqd/N rxe,udp,netrx {nic_ns} 9\n"
            f"prof {tag} server tokio-rt-worker file {server_ns} 9\n"
            f"prof {tag} idle swapper idle 5000000000 9\n"
            f"leaf {tag} client (user) {client_ns}\n")


LOG = ("hipobj-vm: booting guest\n"
       f'rates {{"memcpy_mb_s": {GIB_MB}, "crc32c_ordered_mb_s": 900.0}}\n'
       + transfer_lines(1, 2_000_000_000, 1_000_000_000, 1_000_000_000)
       + transfer_lines(2, 3_000_000_000, 4_000_000_000, 1_000_000_000)
       + transfer_lines(3, 5_000_000_000, 1_000_000_000, 1_000_000_000)
       + f'rates {{"memcpy_mb_s": {GIB_MB}, "crc32c_ordered_mb_s": 900.0}}\n')


class SummaryTest(unittest.TestCase):
    def test_memcpy_equivalents_from_the_log(self):
        fig = s.cpu_memcpy_equivalents(LOG, "rdma", "get")
        # ours per GiB: 3, 4, 6 CPU-s (client + server, the NIC and idle left out) x 1 GiB/s
        self.assertAlmostEqual(fig.value, 4.0)
        self.assertAlmostEqual(fig.lo, 3.0)
        self.assertAlmostEqual(fig.hi, 6.0)
        self.assertEqual(fig.count, 3)
        self.assertEqual(fig.short("GET"), "GET 4.00 (3.00-6.00, n=3)")
        self.assertIn("median 1.00 CPU-s/GiB", fig.excluded)

    def test_summary_lines(self):
        lines = s.cpu_summary(LOG, host_memcpy_gb_s=10.0)
        self.assertIn("NIC (left out) 1.00 (1.00-4.00)", lines[1])
        self.assertIn("profile / process counters: client 1.00 (1.00-1.00)", lines[1])
        self.assertIn("25 GB/s 10.0, 50 GB/s 20.0, 100 GB/s 40.0", lines[3])

    def test_a_transfer_without_its_profile_is_refused(self):
        broken = "\n".join(line for line in LOG.splitlines() if not line.startswith("prof 2 "))
        with self.assertRaisesRegex(ValueError, r"without a profile: \[\(2, 'rdma', 'get'\)\]"):
            s.cpu_log(broken)

    def test_a_log_without_a_memcpy_rate_is_refused(self):
        with self.assertRaisesRegex(ValueError, "no `rates` line"):
            s.cpu_log("\n".join(line for line in LOG.splitlines() if not line.startswith("rates")))


if __name__ == "__main__":
    unittest.main()
