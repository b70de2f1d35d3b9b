//! `include/hipobj.h` agrees with the Rust side: the functions it declares are the ones
//! `hipobj::ffi` exports, its version macros are the crate version, and its enum lists the codes
//! in `OpError`'s order.

use hipobj::error::OpError;
use std::collections::BTreeSet;

const HEADER: &str = include_str!("../include/hipobj.h");
const HEADER_V2: &str = include_str!("../include/hipobj_v2.h");
const HEADER_CHECKSUM: &str = include_str!("../include/hipobj_checksum.h");

fn macro_value(name: &str) -> Option<u32> {
    HEADER
        .lines()
        .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// The names of the functions `header` declares (`HIPOBJ_API` at the start of a line).
fn declared(header: &str) -> BTreeSet<&str> {
    header
        .split("\nHIPOBJ_API ")
        .skip(1)
        .filter_map(|decl| decl.split('(').next())
        .filter_map(|head| {
            head.split(|c: char| c.is_whitespace() || c == '*')
                .next_back()
        })
        .collect()
}

#[test]
fn declared_functions_are_the_exports() {
    let exported: BTreeSet<&str> = hipobj::ffi::EXPORTED_FUNCTIONS.iter().copied().collect();
    assert_eq!(declared(HEADER), exported);
}

#[test]
fn the_v2_header_declares_the_v2_exports() {
    let exported: BTreeSet<&str> = hipobj::ffi::EXPORTED_FUNCTIONS_V2.iter().copied().collect();
    assert_eq!(declared(HEADER_V2), exported);
    assert!(HEADER_V2.contains("#define hipObjNotSupported ((hipObjOpError_t)13)"));
    assert_eq!(hipobj::error::OpError::NotSupported as i32, 13);
}

#[test]
fn the_checksum_header_declares_its_export_and_the_status_values() {
    use hipobj::ffi::checksum::*;
    let exported: BTreeSet<&str> = EXPORTED_FUNCTIONS_CHECKSUM.iter().copied().collect();
    assert_eq!(declared(HEADER_CHECKSUM), exported);
    for (name, value) in [
        ("HIPOBJ_CHECKSUM_VERIFIED", HIPOBJ_CHECKSUM_VERIFIED),
        ("HIPOBJ_CHECKSUM_MISMATCH", HIPOBJ_CHECKSUM_MISMATCH),
        ("HIPOBJ_CHECKSUM_UNCHECKED", HIPOBJ_CHECKSUM_UNCHECKED),
    ] {
        let line = format!("#define {name} ((hipObjChecksumStatus_t){value})");
        assert!(HEADER_CHECKSUM.contains(&line), "{line}");
    }
}

#[test]
fn version_macros_are_the_crate_version() {
    assert_eq!(
        macro_value("HIPOBJ_VERSION_MAJOR"),
        Some(hipobj::version::MAJOR)
    );
    assert_eq!(
        macro_value("HIPOBJ_VERSION_MINOR"),
        Some(hipobj::version::MINOR)
    );
    assert_eq!(
        macro_value("HIPOBJ_VERSION_PATCH"),
        Some(hipobj::version::PATCH)
    );
    let joined = format!(
        "{}.{}.{}",
        hipobj::version::MAJOR,
        hipobj::version::MINOR,
        hipobj::version::PATCH
    );
    assert_eq!(joined, env!("CARGO_PKG_VERSION"));
}

#[test]
fn other_macros() {
    assert_eq!(macro_value("HIPOBJ_BASE_ERR"), Some(6000));
    assert_eq!(macro_value("HIPOBJ_RDMA_OP_PUT"), Some(0));
    assert_eq!(macro_value("HIPOBJ_RDMA_OP_GET"), Some(1));
    assert_eq!(macro_value("HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED"), Some(501));
    assert_eq!(macro_value("HIPOBJ_SYNC_TO_HOST"), Some(0));
    assert_eq!(macro_value("HIPOBJ_SYNC_TO_DEVICE"), Some(1));
}

#[test]
fn enum_order_matches_op_error() {
    let body = HEADER
        .split("typedef enum {")
        .nth(1)
        .and_then(|s| s.split("} hipObjOpError_t;").next())
        .expect("enum");
    let names: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("hipObj"))
        .map(|l| l.trim_end_matches(',').split(" =").next().unwrap_or(l))
        .collect();
    // hipObjNotSupported (13) is hipobj_v2.h's, after the enum's last value
    let rust: Vec<String> = OpError::ALL
        .iter()
        .filter(|&&c| c != OpError::NotSupported)
        .map(|c| format!("hipObj{c:?}"))
        .collect();
    assert_eq!(names, rust);
    assert_eq!(OpError::ALL.last(), Some(&OpError::NotSupported));
    assert!(body.contains("hipObjSuccess = 0,"));
}

#[test]
fn tokens_are_documented_as_not_for_free() {
    assert!(HEADER.contains("never with free()"));
}

const HEADER_TRANSPORT: &str = include_str!("../include/hipobj_transport.h");

#[test]
fn the_transport_header_declares_its_exports_and_values() {
    use hipobj::ffi::transport::*;
    let exported: BTreeSet<&str> = EXPORTED_FUNCTIONS_TRANSPORT.iter().copied().collect();
    assert_eq!(declared(HEADER_TRANSPORT), exported);
    fn names<T>(table: &[(&'static str, T)]) -> Vec<&'static str> {
        table.iter().map(|(n, _)| *n).collect()
    }
    let lines = |ty: &str, names: Vec<&str>| -> Vec<String> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("#define {n} (({ty}){i})"))
            .collect()
    };
    let mut want = lines("hipObjTransportMode_t", names(&MODES));
    want.extend(lines("hipObjTransportPath_t", names(&PATHS)));
    want.extend(lines("hipObjTransportReason_t", names(&REASONS)));
    want.extend(lines("hipObjTransportDirection_t", names(&DIRECTIONS)));
    want.extend(lines("hipObjTransportDestination_t", names(&DESTINATIONS)));
    for line in want {
        assert!(HEADER_TRANSPORT.contains(&line), "{line}");
    }
}

const HEADER_RAILS: &str = include_str!("../include/hipobj_rails.h");

#[test]
fn the_rails_header_declares_its_export_and_the_name_length() {
    use hipobj::ffi::rails::*;
    let exported: BTreeSet<&str> = EXPORTED_FUNCTIONS_RAILS.iter().copied().collect();
    assert_eq!(declared(HEADER_RAILS), exported);
    let line = format!("#define HIPOBJ_RAIL_DEVICE_LEN {HIPOBJ_RAIL_DEVICE_LEN}");
    assert!(HEADER_RAILS.contains(&line), "{line}");
    // the layout tests/c/api_rails_test.c checks on the C side
    assert_eq!(std::mem::size_of::<hipObjRailStats_t>(), 120);
    assert_eq!(std::mem::offset_of!(hipObjRailStats_t, portUp), 112);
}

const HEADER_BATCH: &str = include_str!("../include/hipobj_batch.h");

#[test]
fn the_batch_header_declares_its_exports_values_and_layout() {
    use hipobj::ffi::batch::*;
    let exported: BTreeSet<&str> = EXPORTED_FUNCTIONS_BATCH.iter().copied().collect();
    assert_eq!(declared(HEADER_BATCH), exported);
    for (name, value) in OPCODES.iter().chain(&STATUSES).chain(&PATHS) {
        let line = format!("#define {name} {value}");
        assert!(HEADER_BATCH.contains(&line), "{line}");
    }
    let depth = format!(
        "#define HIPOBJ_BATCH_MAX_DEPTH {}",
        hipobj::batch::MAX_DEPTH
    );
    assert!(HEADER_BATCH.contains(&depth), "{depth}");
    let code = format!("#define HIPOBJ_BATCH_S3_CODE_LEN {HIPOBJ_BATCH_S3_CODE_LEN}");
    assert!(HEADER_BATCH.contains(&code), "{code}");
    // the layout tests/c/api_batch_test.c checks on the C side
    assert_eq!(std::mem::offset_of!(hipObjBatchConfig_t, depth), 48);
    assert_eq!(std::mem::offset_of!(hipObjBatchOp_t, objectOffset), 24);
    assert_eq!(std::mem::offset_of!(hipObjBatchOp_t, cookie), 56);
    assert_eq!(std::mem::offset_of!(hipObjBatchEvent_t, error), 12);
    assert_eq!(std::mem::offset_of!(hipObjBatchEvent_t, s3Code), 24);
    assert_eq!(std::mem::offset_of!(hipObjBatchEvent_t, bytes), 88);
    assert_eq!(std::mem::size_of::<hipObjBatchEvent_t>(), 112);
}
