//! `hipobj info`: every RDMA device (limits, memory windows, ports, GID table with the GID
//! hipObject would use and why), the device hipObject would open for `--nic`, and the GPUs of the
//! runtime the library loads (HIP or CUDA) with the NIC closest to each. All of it from the
//! library's own code (`hipobj::verbs::inventory`, `hipobj::runtime::nic_choice`, `hipobj::hip`),
//! so it says what the library would do.

use crate::args::InfoArgs;
use crate::failure::Failure;
use hipobj::rcv2::negotiate::Protocol;
use hipobj::verbs::{self, DeviceReport, GidKind, PortReport};
use std::fmt::Write as _;

fn kind_text(kind: Option<GidKind>) -> String {
    match kind {
        Some(k) => format!("{k:?} (priority {})", k.priority()),
        None => "not usable".into(),
    }
}

fn why_chosen(port: &PortReport) -> String {
    let Some(idx) = port.chosen_gid else {
        return "no usable RoCE GID on this port".into();
    };
    let Some(g) = port.gids.iter().find(|g| g.index == idx) else {
        return String::new();
    };
    let usable = port.gids.iter().filter(|g| g.kind.is_some()).count();
    format!(
        "hipObject uses GID[{idx}] {}: {}, the highest priority among {usable} usable entries \
         (RoCEv2 IPv4-mapped > RoCEv2 global > RoCEv2 link-local > RoCEv1; lowest index among equals)",
        g.gid,
        kind_text(g.kind)
    )
}

fn device_text(d: &DeviceReport, out: &mut String) {
    let _ = writeln!(
        out,
        "{}  (PCI {}, firmware {}, vendor 0x{:x})",
        d.name,
        d.pci_bus_id.as_deref().unwrap_or("none: software device"),
        if d.fw_ver.is_empty() { "-" } else { &d.fw_ver },
        d.vendor_id
    );
    if let Some(e) = &d.error {
        let _ = writeln!(out, "  cannot be opened or queried: {e}");
        return;
    }
    let mw = &d.memory_windows;
    let _ = writeln!(
        out,
        "  limits: max_qp {}, max_qp_wr {}, max_mr {}, max_mr_size {}, max_qp_rd_atom {}, max_qp_init_rd_atom {}",
        d.max_qp, d.max_qp_wr, d.max_mr, d.max_mr_size, d.max_qp_rd_atom, d.max_qp_init_rd_atom
    );
    let _ = writeln!(
        out,
        "  memory windows: type 1 {}, type 2A {}, type 2B {}, max_mw {}{}",
        yes(mw.type1),
        yes(mw.type2a),
        yes(mw.type2b),
        mw.max_mw,
        if mw.type2b {
            " (per-transfer windows: supported)"
        } else {
            " (no type-2B windows: whole-registration rkeys)"
        }
    );
    for p in &d.ports {
        let _ = writeln!(
            out,
            "  port {}: {}, active MTU {}, max message size {} bytes",
            p.port,
            p.state,
            if p.active_mtu > 0 {
                p.active_mtu.to_string()
            } else {
                "-".into()
            },
            p.max_msg_sz
        );
        for g in &p.gids {
            let mark = if p.chosen_gid == Some(g.index) {
                " <- chosen"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "    GID[{:>3}] {:<40} {:<8} {}{mark}",
                g.index,
                g.gid.to_string(),
                g.gid_type,
                kind_text(g.kind)
            );
        }
        let _ = writeln!(out, "    {}", why_chosen(p));
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The GPU runtime as the library sees it (`hip::load_gpu_runtime`, what `hipObjInit` and `--gpu`
/// use: HIP when it has a device, else CUDA), its devices and the NIC closest to each.
fn gpu_text(lib: &std::sync::Arc<verbs::Lib>, hint: Option<&str>, out: &mut String) {
    let rt = match hipobj::hip::load_gpu_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(
                out,
                "GPU: {e}; transfers use host memory (--gpu unavailable)"
            );
            return;
        }
    };
    let platform = rt.platform();
    let version = rt
        .runtime_version()
        .map(|v| v.to_string())
        .unwrap_or_else(|| "?".into());
    match rt.device_count() {
        Err(e) => {
            let _ = writeln!(out, "GPU: {platform} runtime {version}, no device ({e}); transfers use host memory (--gpu unavailable)");
        }
        Ok(n) => {
            let _ = writeln!(out, "GPU: {platform} runtime {version}, {n} device(s)");
            for dev in 0..n {
                let bus = rt.pci_bus_id(dev).ok();
                let nic = match hipobj::runtime::nic_choice(lib, hint, bus.as_deref()) {
                    Ok(nic) => nic,
                    Err(e) => format!("none ({})", e.detail),
                };
                let _ = writeln!(
                    out,
                    "  GPU {dev}: PCI {}, closest NIC: {nic}",
                    bus.as_deref().unwrap_or("?")
                );
            }
        }
    }
}

/// `--endpoint`: which RDMA protocol the server speaks, by a real request (`rdma::probe`).
fn endpoint_text(args: &InfoArgs, url: &str) -> Result<String, Failure> {
    let creds = crate::credentials::resolve(&args.credentials.sources())?;
    let s3 = crate::s3::S3::new(url, creds)?.with_protocol(args.protocol.rdma_protocol);
    let session = crate::session::Session::open_with(args.nic.as_deref(), None, Some(1))?;
    let byte = session.buffer(1)?;
    let (protocol, status) = crate::rdma::probe(&s3, &args.bucket, |req| byte.transfer(0, 1, req))?;
    let what = match protocol {
        Some(Protocol::V1) => "v1 (docs/protocol.md sections 1-9: one round trip)",
        Some(Protocol::V2) => "v2 (hipobj-rc-v2: PREPARE and READY)",
        None => "none (RDMA declined with 501: plain HTTP only)",
    };
    Ok(format!(
        "endpoint {url}: RDMA protocol {what}; probe: GET s3://{}/<missing key> via {}, last answer HTTP {status}",
        args.bucket,
        session.nic()
    ))
}

pub fn run(args: &InfoArgs) -> Result<(), Failure> {
    let lib = verbs::Lib::load()
        .map_err(|e| Failure::NoNic(format!("libibverbs cannot be loaded: {e}")))?;
    let devices = verbs::inventory(&lib)
        .map_err(|e| Failure::NoNic(format!("cannot list RDMA devices: {e}")))?;
    let mut out = String::new();
    let _ = writeln!(out, "libibverbs: {}", lib.soname());
    let _ = writeln!(out, "RDMA devices: {}", devices.len());
    for d in &devices {
        device_text(d, &mut out);
    }
    let hint = args.nic.as_deref().filter(|h| !h.trim().is_empty());
    let active: Vec<String> = verbs::list_devices(&lib, None)
        .map(|v| v.into_iter().map(|d| d.name).collect())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "active devices: {}",
        if active.is_empty() {
            "none".into()
        } else {
            active.join(" ")
        }
    );
    let choice = hipobj::runtime::nic_choices(&lib, hint);
    match (&choice, hint) {
        (Ok(nics), Some(h)) => {
            let _ = writeln!(
                out,
                "hipObject would use: {} (--nic {h:?}, no GPU: the devices it names, the first preferred; \
                 a device whose port is down takes no transfers until it is back)",
                nics.join(", ")
            );
        }
        (Err(e), Some(h)) => {
            let _ = writeln!(
                out,
                "hipObject would use: nothing with nicHint {h:?}: {}",
                e.detail
            );
        }
        (_, None) => {
            let _ = writeln!(
                out,
                "hipObject would use: without a GPU, the device that nicHint (--nic, HIPOBJ_NIC) names, one of: {}",
                if active.is_empty() { "none".into() } else { active.join(", ") }
            );
        }
    }
    gpu_text(&lib, hint, &mut out);
    print!("{out}");
    if let Some(url) = &args.endpoint {
        println!("{}", endpoint_text(args, url)?);
    }
    if devices.is_empty() {
        return Err(Failure::NoNic("no RDMA device on this host".into()));
    }
    if let (Err(e), Some(_)) = (choice, hint) {
        return Err(Failure::NoNic(e.detail.into_owned()));
    }
    Ok(())
}
