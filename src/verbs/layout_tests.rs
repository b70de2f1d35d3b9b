//! Checks every size, alignment and field offset of `sys` against the installed
//! `<infiniband/verbs.h>`: a C probe is written, compiled with `cc` and run, and its numbers are
//! compared with `size_of`/`align_of`/`offset_of!`. Any difference fails the test (as does a
//! missing compiler or header: the layout could not be checked).

use std::mem::{align_of, offset_of, size_of};
use std::process::Command;

use super::sys::*;

/// (C expression, Rust value)
type Check = (String, usize);

macro_rules! size_align {
    ($c:literal, $t:ty) => {
        [
            (format!("sizeof({})", $c), size_of::<$t>()),
            (format!("_Alignof({})", $c), align_of::<$t>()),
        ]
    };
}

macro_rules! offsets {
    ($c:literal, $t:ty, [$($f:ident),* $(,)?]) => {
        [$((format!("offsetof({}, {})", $c, stringify!($f)), offset_of!($t, $f))),*]
    };
}

fn checks() -> Vec<Check> {
    let mut v: Vec<Check> = Vec::new();
    v.extend(size_align!("struct _ibv_device_ops", ibv_device_ops_compat));
    v.extend(size_align!("struct ibv_device", ibv_device));
    v.extend(offsets!(
        "struct ibv_device",
        ibv_device,
        [
            _ops,
            node_type,
            transport_type,
            name,
            dev_name,
            dev_path,
            ibdev_path
        ]
    ));

    v.extend(size_align!("struct ibv_context_ops", ibv_context_ops));
    v.extend(offsets!(
        "struct ibv_context_ops",
        ibv_context_ops,
        [alloc_mw, dealloc_mw, poll_cq, post_send, post_recv]
    ));
    v.extend(size_align!("struct ibv_context", ibv_context));
    v.extend(offsets!(
        "struct ibv_context",
        ibv_context,
        [
            device,
            ops,
            cmd_fd,
            async_fd,
            num_comp_vectors,
            mutex,
            abi_compat
        ]
    ));

    v.extend(size_align!("struct ibv_device_attr", ibv_device_attr));
    v.extend(offsets!(
        "struct ibv_device_attr",
        ibv_device_attr,
        [
            fw_ver,
            node_guid,
            sys_image_guid,
            max_mr_size,
            page_size_cap,
            vendor_id,
            vendor_part_id,
            hw_ver,
            max_qp,
            max_qp_wr,
            device_cap_flags,
            max_sge,
            max_sge_rd,
            max_cq,
            max_cqe,
            max_mr,
            max_pd,
            max_qp_rd_atom,
            max_ee_rd_atom,
            max_res_rd_atom,
            max_qp_init_rd_atom,
            max_pkeys,
            local_ca_ack_delay,
            phys_port_cnt,
        ]
    ));
    // the 16 ints between max_qp_init_rd_atom and max_pkeys
    v.push((
        "offsetof(struct ibv_device_attr, max_ee_init_rd_atom)".into(),
        offset_of!(ibv_device_attr, _before_max_mw),
    ));

    v.extend(size_align!("struct ibv_port_attr", ibv_port_attr));
    v.extend(offsets!(
        "struct ibv_port_attr",
        ibv_port_attr,
        [
            state,
            max_mtu,
            active_mtu,
            gid_tbl_len,
            port_cap_flags,
            max_msg_sz,
            bad_pkey_cntr,
            qkey_viol_cntr,
            pkey_tbl_len,
            lid,
            sm_lid,
            lmc,
            max_vl_num,
            sm_sl,
            subnet_timeout,
            init_type_reply,
            active_width,
            active_speed,
            phys_state,
            link_layer,
            flags,
            port_cap_flags2,
        ]
    ));

    v.extend(size_align!("union ibv_gid", ibv_gid));
    v.extend(offsets!("union ibv_gid", ibv_gid, [raw]));
    v.extend(size_align!("struct ibv_gid_entry", ibv_gid_entry));
    v.extend(offsets!(
        "struct ibv_gid_entry",
        ibv_gid_entry,
        [gid, gid_index, port_num, gid_type, ndev_ifindex]
    ));

    v.extend(size_align!("struct ibv_pd", ibv_pd));
    v.extend(offsets!("struct ibv_pd", ibv_pd, [context, handle]));
    v.extend(size_align!("struct ibv_mr", ibv_mr));
    v.extend(offsets!(
        "struct ibv_mr",
        ibv_mr,
        [context, pd, addr, length, handle, lkey, rkey]
    ));
    v.extend(size_align!("struct ibv_cq", ibv_cq));
    v.extend(offsets!(
        "struct ibv_cq",
        ibv_cq,
        [
            context,
            channel,
            cq_context,
            handle,
            cqe,
            mutex,
            cond,
            comp_events_completed,
            async_events_completed,
        ]
    ));
    v.extend(size_align!("struct ibv_qp", ibv_qp));
    v.extend(offsets!(
        "struct ibv_qp",
        ibv_qp,
        [
            context,
            qp_context,
            pd,
            send_cq,
            recv_cq,
            srq,
            handle,
            qp_num,
            state,
            qp_type,
            mutex,
            cond,
            events_completed,
        ]
    ));

    v.extend(size_align!("struct ibv_qp_cap", ibv_qp_cap));
    v.extend(offsets!(
        "struct ibv_qp_cap",
        ibv_qp_cap,
        [
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data
        ]
    ));
    v.extend(size_align!("struct ibv_qp_init_attr", ibv_qp_init_attr));
    v.extend(offsets!(
        "struct ibv_qp_init_attr",
        ibv_qp_init_attr,
        [qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all]
    ));
    v.extend(size_align!("struct ibv_global_route", ibv_global_route));
    v.extend(offsets!(
        "struct ibv_global_route",
        ibv_global_route,
        [dgid, flow_label, sgid_index, hop_limit, traffic_class]
    ));
    v.extend(size_align!("struct ibv_ah_attr", ibv_ah_attr));
    v.extend(offsets!(
        "struct ibv_ah_attr",
        ibv_ah_attr,
        [
            grh,
            dlid,
            sl,
            src_path_bits,
            static_rate,
            is_global,
            port_num
        ]
    ));
    v.extend(size_align!("struct ibv_qp_attr", ibv_qp_attr));
    v.extend(offsets!(
        "struct ibv_qp_attr",
        ibv_qp_attr,
        [
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            cap,
            ah_attr,
            alt_ah_attr,
            pkey_index,
            alt_pkey_index,
            en_sqd_async_notify,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            rate_limit,
        ]
    ));

    v.extend(size_align!("struct ibv_sge", ibv_sge));
    v.extend(offsets!("struct ibv_sge", ibv_sge, [addr, length, lkey]));
    v.extend(size_align!("struct ibv_recv_wr", ibv_recv_wr));
    v.extend(offsets!(
        "struct ibv_recv_wr",
        ibv_recv_wr,
        [wr_id, next, sg_list, num_sge]
    ));
    v.extend(size_align!("struct ibv_send_wr", ibv_send_wr));
    v.extend(offsets!(
        "struct ibv_send_wr",
        ibv_send_wr,
        [wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type]
    ));
    v.push((
        "offsetof(struct ibv_send_wr, bind_mw)".into(),
        offset_of!(ibv_send_wr, bind_mw_or_tso),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, tso)".into(),
        offset_of!(ibv_send_wr, bind_mw_or_tso),
    ));
    v.push((
        "sizeof(((struct ibv_send_wr *)0)->bind_mw)".into(),
        size_of::<ibv_send_wr_bind_mw>(),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, invalidate_rkey)".into(),
        offset_of!(ibv_send_wr, imm_data),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, bind_mw.rkey)".into(),
        offset_of!(ibv_send_wr, bind_mw_or_tso) + offset_of!(ibv_send_wr_bind_mw, rkey),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, bind_mw.bind_info)".into(),
        offset_of!(ibv_send_wr, bind_mw_or_tso) + offset_of!(ibv_send_wr_bind_mw, bind_info),
    ));
    v.extend(size_align!("struct ibv_mw", ibv_mw));
    v.extend(offsets!(
        "struct ibv_mw",
        ibv_mw,
        [context, pd, rkey, handle]
    ));
    v.push((
        "offsetof(struct ibv_mw, type)".into(),
        offset_of!(ibv_mw, mw_type),
    ));
    v.extend(size_align!("struct ibv_mw_bind_info", ibv_mw_bind_info));
    v.extend(offsets!(
        "struct ibv_mw_bind_info",
        ibv_mw_bind_info,
        [mr, addr, length, mw_access_flags]
    ));
    v.push((
        "sizeof(((struct ibv_send_wr *)0)->wr)".into(),
        size_of::<ibv_send_wr_wr>(),
    ));
    v.push((
        "_Alignof(((struct ibv_send_wr *)0)->wr)".into(),
        align_of::<ibv_send_wr_wr>(),
    ));
    v.push((
        "sizeof(((struct ibv_send_wr *)0)->wr.rdma)".into(),
        size_of::<ibv_send_wr_rdma>(),
    ));
    v.push((
        "sizeof(((struct ibv_send_wr *)0)->wr.atomic)".into(),
        size_of::<[u64; 4]>(),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, wr.rdma.remote_addr)".into(),
        offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_rdma, remote_addr),
    ));
    v.push((
        "offsetof(struct ibv_send_wr, wr.rdma.rkey)".into(),
        offset_of!(ibv_send_wr, wr) + offset_of!(ibv_send_wr_rdma, rkey),
    ));
    v.extend(size_align!("struct ibv_wc", ibv_wc));
    v.extend(offsets!(
        "struct ibv_wc",
        ibv_wc,
        [
            wr_id,
            status,
            opcode,
            vendor_err,
            byte_len,
            imm_data,
            qp_num,
            src_qp,
            wc_flags,
            pkey_index,
            slid,
            sl,
            dlid_path_bits,
        ]
    ));

    // Enum values and flags the module passes to or reads from libibverbs.
    let consts: [(&str, i64); 27] = [
        ("IBV_SYSFS_NAME_MAX", IBV_SYSFS_NAME_MAX as i64),
        ("IBV_SYSFS_PATH_MAX", IBV_SYSFS_PATH_MAX as i64),
        ("IBV_PORT_ACTIVE", IBV_PORT_ACTIVE.into()),
        ("IBV_PORT_ACTIVE_DEFER", IBV_PORT_ACTIVE_DEFER.into()),
        ("IBV_GID_TYPE_IB", IBV_GID_TYPE_IB.into()),
        ("IBV_GID_TYPE_ROCE_V1", IBV_GID_TYPE_ROCE_V1.into()),
        ("IBV_GID_TYPE_ROCE_V2", IBV_GID_TYPE_ROCE_V2.into()),
        ("IBV_QPT_RC", IBV_QPT_RC.into()),
        ("IBV_QPS_INIT", IBV_QPS_INIT.into()),
        ("IBV_QPS_RTR", IBV_QPS_RTR.into()),
        ("IBV_QPS_RTS", IBV_QPS_RTS.into()),
        ("IBV_QPS_ERR", IBV_QPS_ERR.into()),
        ("IBV_QP_STATE", IBV_QP_STATE.into()),
        ("IBV_QP_ACCESS_FLAGS", IBV_QP_ACCESS_FLAGS.into()),
        ("IBV_QP_PKEY_INDEX", IBV_QP_PKEY_INDEX.into()),
        ("IBV_QP_PORT", IBV_QP_PORT.into()),
        ("IBV_QP_AV", IBV_QP_AV.into()),
        ("IBV_QP_PATH_MTU", IBV_QP_PATH_MTU.into()),
        ("IBV_QP_DEST_QPN", IBV_QP_DEST_QPN.into()),
        ("IBV_QP_TIMEOUT", IBV_QP_TIMEOUT.into()),
        ("IBV_QP_RETRY_CNT", IBV_QP_RETRY_CNT.into()),
        ("IBV_QP_RNR_RETRY", IBV_QP_RNR_RETRY.into()),
        ("IBV_QP_RQ_PSN", IBV_QP_RQ_PSN.into()),
        ("IBV_QP_MAX_QP_RD_ATOMIC", IBV_QP_MAX_QP_RD_ATOMIC.into()),
        ("IBV_QP_MIN_RNR_TIMER", IBV_QP_MIN_RNR_TIMER.into()),
        ("IBV_QP_SQ_PSN", IBV_QP_SQ_PSN.into()),
        (
            "IBV_QP_MAX_DEST_RD_ATOMIC",
            IBV_QP_MAX_DEST_RD_ATOMIC.into(),
        ),
    ];
    let more_consts: [(&str, i64); 20] = [
        ("IBV_WR_RDMA_WRITE", IBV_WR_RDMA_WRITE.into()),
        ("IBV_WR_RDMA_READ", IBV_WR_RDMA_READ.into()),
        ("IBV_WR_LOCAL_INV", IBV_WR_LOCAL_INV.into()),
        ("IBV_WR_BIND_MW", IBV_WR_BIND_MW.into()),
        ("IBV_WR_SEND_WITH_INV", IBV_WR_SEND_WITH_INV.into()),
        ("IBV_WC_SEND", crate::verbs::WC_SEND.into()),
        (
            "IBV_DEVICE_MEM_WINDOW_TYPE_2B",
            IBV_DEVICE_MEM_WINDOW_TYPE_2B.into(),
        ),
        ("IBV_MW_TYPE_2", IBV_MW_TYPE_2.into()),
        (
            "IBV_ACCESS_MW_BIND",
            crate::verbs::Access::MW_BIND.bits().into(),
        ),
        ("IBV_WC_BIND_MW", crate::verbs::WC_BIND_MW.into()),
        ("IBV_WC_LOCAL_INV", crate::verbs::WC_LOCAL_INV.into()),
        (
            "offsetof(struct ibv_device_attr, max_mw)",
            offset_of!(ibv_device_attr, max_mw) as i64,
        ),
        ("IBV_SEND_SIGNALED", IBV_SEND_SIGNALED.into()),
        (
            "IBV_ACCESS_LOCAL_WRITE",
            crate::verbs::Access::LOCAL_WRITE.bits().into(),
        ),
        (
            "IBV_ACCESS_REMOTE_WRITE",
            crate::verbs::Access::REMOTE_WRITE.bits().into(),
        ),
        (
            "IBV_ACCESS_REMOTE_READ",
            crate::verbs::Access::REMOTE_READ.bits().into(),
        ),
        ("IBV_WC_RDMA_WRITE", crate::verbs::WC_RDMA_WRITE.into()),
        ("IBV_WC_RDMA_READ", crate::verbs::WC_RDMA_READ.into()),
        ("IBV_WC_WR_FLUSH_ERR", crate::verbs::WC_WR_FLUSH_ERR.into()),
        (
            "IBV_WC_RETRY_EXC_ERR",
            crate::verbs::WC_RETRY_EXC_ERR.into(),
        ),
    ];
    let mtus: [(&str, i64); 5] = [
        ("IBV_MTU_256", crate::verbs::Mtu::M256 as i64),
        ("IBV_MTU_512", crate::verbs::Mtu::M512 as i64),
        ("IBV_MTU_1024", crate::verbs::Mtu::M1024 as i64),
        ("IBV_MTU_2048", crate::verbs::Mtu::M2048 as i64),
        ("IBV_MTU_4096", crate::verbs::Mtu::M4096 as i64),
    ];
    for (name, value) in consts.iter().chain(&more_consts).chain(&mtus) {
        v.push((
            format!("(size_t)({name})"),
            usize::try_from(*value).expect("constants are non-negative"),
        ));
    }
    v
}

#[test]
fn sys_layout_matches_verbs_h() {
    let checks = checks();
    let dir = std::env::temp_dir().join(format!("hipobj-verbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    let mut c = String::from("#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\nint main(void) {\n");
    for (expr, _) in &checks {
        c.push_str(&format!("    printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    c.push_str("    return 0;\n}\n");
    std::fs::write(&src, c).expect("write probe");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc).arg("-o").arg(&exe).arg(&src).output().unwrap_or_else(|e| {
        panic!("cannot run {cc} to build the verbs.h layout probe (install gcc and libibverbs-dev): {e}")
    });
    assert!(
        out.status.success(),
        "layout probe did not compile (libibverbs-dev installed?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run layout probe");
    assert!(run.status.success(), "layout probe failed");
    let stdout = String::from_utf8(run.stdout).expect("probe output is ASCII");
    let c_values: Vec<usize> = stdout
        .lines()
        .map(|l| l.parse().expect("probe prints numbers"))
        .collect();
    assert_eq!(
        c_values.len(),
        checks.len(),
        "probe printed a value per check"
    );
    let mismatches: Vec<String> = checks
        .iter()
        .zip(&c_values)
        .filter(|((_, rust), c)| rust != *c)
        .map(|((expr, rust), c)| format!("{expr}: C {c}, Rust {rust}"))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        mismatches.is_empty(),
        "verbs.h layout differs:\n{}",
        mismatches.join("\n")
    );
    eprintln!(
        "verbs.h layout: {} sizes, alignments, offsets and constants match",
        checks.len()
    );
}
