//! Pure NIC, port and GID choice (the C++ reference's rules, without its bugs): nic-hint
//! filtering, PCIe bus-id distance, GID kind classification and priority.

use super::sys;

/// The kind of a usable RoCE GID, from best to worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GidKind {
    RoceV2Ipv4,
    RoceV2Global,
    RoceV2LinkLocal,
    RoceV1Global,
    RoceV1LinkLocal,
}

impl GidKind {
    /// Priority, higher wins: RoCE v2 IPv4-mapped, then RoCE v2 global, RoCE v2 link-local, RoCE v1
    /// global, RoCE v1 link-local.
    pub fn priority(self) -> u8 {
        match self {
            GidKind::RoceV2Ipv4 => 5,
            GidKind::RoceV2Global => 3,
            GidKind::RoceV2LinkLocal => 2,
            GidKind::RoceV1Global => 1,
            GidKind::RoceV1LinkLocal => 0,
        }
    }
}

/// The RoCE version of a GID table entry, as reported by `ibv_query_gid_ex` (or sysfs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GidType {
    RoceV1,
    RoceV2,
    /// InfiniBand, unknown, or unreadable: never used.
    Other,
}

impl GidType {
    pub(crate) fn from_verbs(gid_type: u32) -> GidType {
        match gid_type {
            sys::IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
            sys::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
            _ => GidType::Other,
        }
    }

    /// The text of `/sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i>`.
    pub(crate) fn from_sysfs(text: &str) -> GidType {
        match text.trim() {
            "RoCE v2" => GidType::RoceV2,
            "IB/RoCE v1" | "RoCE v1" => GidType::RoceV1,
            _ => GidType::Other,
        }
    }
}

/// `::ffff:a.b.c.d`: bytes 0-9 zero, bytes 10-11 0xff.
pub(crate) fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// fe80::/10, the IPv6 link-local prefix.
pub(crate) fn is_link_local(gid: &[u8; 16]) -> bool {
    gid[0] == 0xfe && gid[1] & 0xc0 == 0x80
}

/// The kind of a GID entry, or `None` for an entry that must not be used (all-zero GID, or not
/// RoCE v1/v2).
pub(crate) fn classify_gid(gid: &[u8; 16], gid_type: GidType) -> Option<GidKind> {
    if gid.iter().all(|&b| b == 0) {
        return None;
    }
    match gid_type {
        GidType::RoceV2 if is_ipv4_mapped(gid) => Some(GidKind::RoceV2Ipv4),
        GidType::RoceV2 if is_link_local(gid) => Some(GidKind::RoceV2LinkLocal),
        GidType::RoceV2 => Some(GidKind::RoceV2Global),
        GidType::RoceV1 if is_link_local(gid) => Some(GidKind::RoceV1LinkLocal),
        GidType::RoceV1 => Some(GidKind::RoceV1Global),
        GidType::Other => None,
    }
}

/// One readable GID table entry of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GidCandidate {
    pub index: u32,
    pub gid: [u8; 16],
    pub gid_type: GidType,
}

/// The best usable entry: highest priority, the earliest index among equals. `None` when no
/// entry qualifies (never "index 0 anyway"). Entries whose index does not fit the `u8`
/// `sgid_index` of an address vector are skipped.
pub(crate) fn best_gid(candidates: &[GidCandidate]) -> Option<(GidCandidate, GidKind)> {
    let mut best: Option<(GidCandidate, GidKind)> = None;
    for c in candidates {
        if c.index > u32::from(u8::MAX) {
            continue;
        }
        let Some(kind) = classify_gid(&c.gid, c.gid_type) else {
            continue;
        };
        let better = match &best {
            None => true,
            Some((b, bk)) => {
                kind.priority() > bk.priority()
                    || (kind.priority() == bk.priority() && c.index < b.index)
            }
        };
        if better {
            best = Some((*c, kind));
        }
    }
    best
}

/// Whether a device named `name` passes the nic hint: no hint (or an empty one) passes every
/// device; otherwise one of the comma-separated items must equal `name` exactly, after stripping
/// the item's leading spaces and tabs (trailing whitespace is kept, as in the reference).
pub(crate) fn hint_matches(nic_hint: Option<&str>, name: &str) -> bool {
    match nic_hint {
        None | Some("") => true,
        Some(hint) => hint
            .split(',')
            .any(|item| item.trim_start_matches([' ', '\t']) == name),
    }
}

/// Distance between two PCIe bus ids (the NIC closest to the GPU wins): each is cut at its last `:`
/// (`0000:42:00.0` -> `0000:42`); equal prefixes are 0 apart, otherwise the distance is the number
/// of characters of both after their common prefix. An empty id is `u32::MAX` from everything.
pub fn pci_distance(a: &str, b: &str) -> u32 {
    if a.is_empty() || b.is_empty() {
        return u32::MAX;
    }
    let cut = |s: &str| -> usize { s.rfind(':').unwrap_or(s.len()) };
    let a = &a.as_bytes()[..cut(a)];
    let b = &b.as_bytes()[..cut(b)];
    if a == b {
        return 0;
    }
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    u32::try_from((a.len() - common) + (b.len() - common)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(s: &str) -> [u8; 16] {
        let addr: std::net::Ipv6Addr = s.parse().expect("test GID literal");
        addr.octets()
    }

    #[test]
    fn classify_gid_table() {
        use GidKind::*;
        use GidType::*;
        let cases: &[(&str, GidType, Option<GidKind>)] = &[
            ("::", RoceV2, None),
            ("::", RoceV1, None),
            ("::ffff:169.254.77.1", RoceV2, Some(RoceV2Ipv4)),
            ("::ffff:127.0.0.1", RoceV2, Some(RoceV2Ipv4)),
            ("::ffff:10.0.0.1", RoceV1, Some(RoceV1Global)),
            ("fe80::200:ff:fe00:0", RoceV2, Some(RoceV2LinkLocal)),
            ("febf::1", RoceV2, Some(RoceV2LinkLocal)),
            ("fec0::1", RoceV2, Some(RoceV2Global)),
            ("fe80::1", RoceV1, Some(RoceV1LinkLocal)),
            ("2001:db8::1", RoceV2, Some(RoceV2Global)),
            ("2001:db8::1", RoceV1, Some(RoceV1Global)),
            ("::1", RoceV2, Some(RoceV2Global)),
            ("2001:db8::1", Other, None),
            ("::ffff:10.0.0.1", Other, None),
            // bytes 10-11 must both be 0xff
            ("::fffe:10.0.0.1", RoceV2, Some(RoceV2Global)),
        ];
        for (text, ty, want) in cases {
            assert_eq!(classify_gid(&gid(text), *ty), *want, "{text} {ty:?}");
        }
    }

    #[test]
    fn gid_type_from_verbs_and_sysfs() {
        assert_eq!(
            GidType::from_verbs(sys::IBV_GID_TYPE_ROCE_V2),
            GidType::RoceV2
        );
        assert_eq!(
            GidType::from_verbs(sys::IBV_GID_TYPE_ROCE_V1),
            GidType::RoceV1
        );
        assert_eq!(GidType::from_verbs(sys::IBV_GID_TYPE_IB), GidType::Other);
        assert_eq!(GidType::from_verbs(9), GidType::Other);
        assert_eq!(GidType::from_sysfs("RoCE v2\n"), GidType::RoceV2);
        assert_eq!(GidType::from_sysfs("IB/RoCE v1\n"), GidType::RoceV1);
        assert_eq!(GidType::from_sysfs("RoCE v1"), GidType::RoceV1);
        assert_eq!(GidType::from_sysfs(""), GidType::Other);
        assert_eq!(GidType::from_sysfs("IB"), GidType::Other);
    }

    fn cand(index: u32, text: &str, gid_type: GidType) -> GidCandidate {
        GidCandidate {
            index,
            gid: gid(text),
            gid_type,
        }
    }

    #[test]
    fn best_gid_table() {
        use GidType::*;
        let bcm = [
            cand(0, "fe80::1", RoceV1),
            cand(1, "fe80::1", RoceV2),
            cand(2, "::ffff:10.1.2.3", RoceV1),
            cand(3, "::ffff:10.1.2.3", RoceV2),
        ];
        let rxe_lo = [
            cand(0, "fe80::200:ff:fe00:0", RoceV2),
            cand(1, "::ffff:127.0.0.1", RoceV2),
            cand(2, "::1", RoceV2),
        ];
        type Case = (&'static str, Vec<GidCandidate>, Option<(u32, GidKind)>);
        let cases: Vec<Case> = vec![
            (
                "reference example (BCM57608)",
                bcm.to_vec(),
                Some((3, GidKind::RoceV2Ipv4)),
            ),
            ("rxe on lo", rxe_lo.to_vec(), Some((1, GidKind::RoceV2Ipv4))),
            ("empty table", vec![], None),
            (
                "only zero GIDs",
                vec![cand(0, "::", RoceV2), cand(1, "::", RoceV1)],
                None,
            ),
            (
                "only IB GIDs: no index-0 fallback",
                vec![cand(0, "fe80::1", Other)],
                None,
            ),
            (
                "zero entry skipped, v2 global over v2 link-local",
                vec![
                    cand(0, "::", RoceV2),
                    cand(1, "fe80::1", RoceV2),
                    cand(2, "2001:db8::1", RoceV2),
                ],
                Some((2, GidKind::RoceV2Global)),
            ),
            (
                "v2 link-local over v1 global",
                vec![cand(0, "2001:db8::1", RoceV1), cand(1, "fe80::1", RoceV2)],
                Some((1, GidKind::RoceV2LinkLocal)),
            ),
            (
                "v1 global over v1 link-local",
                vec![
                    cand(0, "fe80::1", RoceV1),
                    cand(1, "::ffff:10.0.0.1", RoceV1),
                ],
                Some((1, GidKind::RoceV1Global)),
            ),
            (
                "ties keep the earliest index",
                vec![
                    cand(4, "::ffff:10.0.0.2", RoceV2),
                    cand(2, "::ffff:10.0.0.1", RoceV2),
                ],
                Some((2, GidKind::RoceV2Ipv4)),
            ),
            (
                "index beyond u8 skipped",
                vec![
                    cand(300, "::ffff:10.0.0.1", RoceV2),
                    cand(5, "fe80::1", RoceV2),
                ],
                Some((5, GidKind::RoceV2LinkLocal)),
            ),
        ];
        for (what, table, want) in cases {
            let got = best_gid(&table).map(|(c, k)| (c.index, k));
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn hint_matches_table() {
        let cases: &[(Option<&str>, &str, bool)] = &[
            (None, "mlx5_0", true),
            (Some(""), "mlx5_0", true),
            (Some("mlx5_0"), "mlx5_0", true),
            (Some("mlx5_0"), "mlx5_1", false),
            (Some("mlx5_0"), "mlx5_00", false),
            (Some("MLX5_0"), "mlx5_0", false),
            (Some("rxe0, rxe1"), "rxe1", true),
            (Some("rxe0,\t \trxe1"), "rxe1", true),
            (Some("rxe0,rxe1 "), "rxe1", false),
            (Some(" rxe0"), "rxe0", true),
            (Some("rxe0,"), "", true),
            (Some("rxe0"), "", false),
            (Some("rxe"), "rxe0", false),
        ];
        for (hint, name, want) in cases {
            assert_eq!(
                hint_matches(*hint, name),
                *want,
                "hint {hint:?} name {name:?}"
            );
        }
    }

    #[test]
    fn pci_distance_table() {
        let cases: &[(&str, &str, u32)] = &[
            ("0000:42:00.0", "0000:43:00.0", 2),
            ("0000:42:00.0", "0000:18:00.0", 4),
            ("0000:42:00.0", "0000:11:00.0", 4),
            ("0000:42:00.0", "0000:42:00.1", 0),
            ("0000:42:00.0", "0000:42:00.0", 0),
            ("0000:42:00.0", "0001:42:00.0", 8),
            ("0000:42", "0000:42:00.0", 3),
            ("", "0000:42:00.0", u32::MAX),
            ("0000:42:00.0", "", u32::MAX),
            ("abc", "abd", 2),
        ];
        for (a, b, want) in cases {
            assert_eq!(pci_distance(a, b), *want, "{a} vs {b}");
            assert_eq!(pci_distance(b, a), *want, "{b} vs {a} (symmetric)");
        }
        // the reference example: GPU 0000:42:00.0 picks the 0000:43 NIC
        let nics = ["0000:18:00.0", "0000:43:00.0", "0000:11:00.0"];
        let best = nics.iter().min_by_key(|n| pci_distance("0000:42:00.0", n));
        assert_eq!(best, Some(&"0000:43:00.0"));
    }
}
