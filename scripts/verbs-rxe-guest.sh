#!/bin/sh
# Guest script for the Soft-RoCE VM recipe (/work/shared/softroce/run-vm.sh --hostroot --share <worktree>
# --script scripts/verbs-rxe-guest.sh): rxe0 on a dummy netdev with 169.254.77.1/32 (GID
# ::ffff:169.254.77.1, RoCE v2), then the host-built verbs test binaries via 'chroot /host'.
# Build first on the host: cargo test -p hipobj --test verbs_rxe --lib --no-run
# The binaries are picked up as the newest target/debug/deps/{verbs_rxe,hipobj}-<hash>.
WT=$(sed -n 's/.*rt\.workdir=\([^ ]*\).*/\1/p' /proc/cmdline)
/usr/sbin/ip link add rt0 type dummy || exit 1
/usr/sbin/ip link set rt0 mtu 9000 up || exit 1
/usr/sbin/ip addr add 169.254.77.1/32 dev rt0 || exit 1
rdma link add rxe0 type rxe netdev rt0 || exit 1
rdma link show
cat /sys/class/infiniband/rxe0/ports/1/gids/1 /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1 2>/dev/null
rc=0
cd "$WT" || exit 1
RXE=$(ls -t target/debug/deps/verbs_rxe-* | grep -v '\.d$' | head -1)
UNIT=$(ls -t target/debug/deps/hipobj-* | grep -v '\.d$' | grep -v '\.rlib$' | head -1)
echo "== $RXE"
chroot /host sh -c "cd $WT && HIPOBJ_VM_DEVICES=rxe0 HIPOBJ_VM_EXPECT_GID=::ffff:169.254.77.1 ./$RXE --test-threads=1 --nocapture" || rc=1
echo "== $UNIT verbs:: (unit tests, in the guest)"
chroot /host sh -c "cd $WT && ./$UNIT --test-threads=1 --nocapture verbs::" || rc=1
exit $rc
