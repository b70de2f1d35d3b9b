//! Which of the server's RDMA devices serves a client (issue 40, several NICs): the one that
//! faces the client's GID.
//!
//! A device faces the client when its own GID shares the longest prefix with the client's GID
//! among all the server's devices, whatever their port state. For RoCEv2's IPv4-mapped GIDs the
//! first 96 bits are the same for every address, so this is the longest common IPv4 prefix: the
//! device on the client's subnet. Several devices may face a client equally (one subnet, or none
//! closer than another); the first of them, in `--device` order, whose port is ACTIVE serves it.
//!
//! When every device facing the client is down the request is refused ([`Choice::FacingDown`])
//! rather than sent over a device on another subnet: that device's packets would have to be
//! routed to the client's subnet, whose link on this side is the one that is down, and the client
//! may do better by failing over to its own other rail, whose GID faces another device here.
//!
//! The choice is a pure function of GIDs and port states; `engines` asks the ports and follows it.

/// Where a request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Serve it on the device at this index.
    Serve(usize),
    /// Every device facing the client is down; the index of the first of them (for the log).
    FacingDown(usize),
    /// The server has no device at all.
    NoDevice,
}

/// Bits the two GIDs have in common from the first one on (0..=128).
pub fn common_prefix_bits(a: &[u8; 16], b: &[u8; 16]) -> u32 {
    (u128::from_be_bytes(*a) ^ u128::from_be_bytes(*b)).leading_zeros()
}

/// The device of `devices` (their GIDs, in `--device` order) that serves a client of GID
/// `client`. `is_active(i)` tells whether device `i`'s port is ACTIVE now; it is asked only of
/// devices facing the client, in order, until one is.
pub fn choose(
    client: &[u8; 16],
    devices: &[[u8; 16]],
    mut is_active: impl FnMut(usize) -> bool,
) -> Choice {
    let Some(longest) = devices
        .iter()
        .map(|gid| common_prefix_bits(client, gid))
        .max()
    else {
        return Choice::NoDevice;
    };
    let facing: Vec<usize> = (0..devices.len())
        .filter(|&i| common_prefix_bits(client, &devices[i]) == longest)
        .collect();
    let Some(&first) = facing.first() else {
        return Choice::NoDevice;
    };
    facing
        .into_iter()
        .find(|&i| is_active(i))
        .map_or(Choice::FacingDown(first), Choice::Serve)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `::ffff:a.b.c.d`, the RoCEv2 GID of an IPv4 address.
    fn gid(ip: [u8; 4]) -> [u8; 16] {
        let mut g = [0; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&ip);
        g
    }

    /// The lane's server: rxe1 on 169.254.77.0/24, rxe3 on 169.254.78.0/24.
    fn lane() -> [[u8; 16]; 2] {
        [gid([169, 254, 77, 2]), gid([169, 254, 78, 2])]
    }

    const UP: fn(usize) -> bool = |_| true;

    #[test]
    fn prefix_bits_count_from_the_first_bit() {
        let a = gid([169, 254, 77, 2]);
        assert_eq!(common_prefix_bits(&a, &a), 128);
        // 77 = 0b0100_1101, 78 = 0b0100_1110: 6 bits of the third byte in common.
        assert_eq!(common_prefix_bits(&a, &gid([169, 254, 78, 2])), 96 + 16 + 6);
        // 2 = 0b10, 1 = 0b01: 6 bits of the last byte.
        assert_eq!(common_prefix_bits(&a, &gid([169, 254, 77, 1])), 96 + 24 + 6);
        assert_eq!(common_prefix_bits(&[0; 16], &[0x80; 16]), 0);
    }

    #[test]
    fn each_client_rail_goes_to_the_device_on_its_subnet() {
        let devices = lane();
        assert_eq!(
            choose(&gid([169, 254, 77, 1]), &devices, UP),
            Choice::Serve(0)
        );
        assert_eq!(
            choose(&gid([169, 254, 78, 1]), &devices, UP),
            Choice::Serve(1)
        );
        // Listed the other way round, the same devices are chosen.
        let swapped = [devices[1], devices[0]];
        assert_eq!(
            choose(&gid([169, 254, 77, 1]), &swapped, UP),
            Choice::Serve(1)
        );
    }

    #[test]
    fn the_facing_device_down_refuses_instead_of_crossing_subnets() {
        let devices = lane();
        let mut asked = Vec::new();
        let choice = choose(&gid([169, 254, 77, 1]), &devices, |i| {
            asked.push(i);
            i != 0
        });
        assert_eq!(choice, Choice::FacingDown(0));
        assert_eq!(asked, [0], "only the facing device's port is asked");
        // The other rail's clients are still served.
        assert_eq!(
            choose(&gid([169, 254, 78, 1]), &devices, |i| i != 0),
            Choice::Serve(1)
        );
    }

    #[test]
    fn ties_go_to_the_first_listed_device_that_is_up() {
        // Two devices on one subnet, equally far from the client.
        let devices = [gid([10, 0, 0, 5]), gid([10, 0, 0, 6]), gid([10, 1, 0, 5])];
        let client = gid([10, 0, 0, 1]);
        assert_eq!(common_prefix_bits(&client, &devices[0]), 125);
        assert_eq!(common_prefix_bits(&client, &devices[1]), 125);
        assert_eq!(choose(&client, &devices, UP), Choice::Serve(0));
        assert_eq!(choose(&client, &devices, |i| i != 0), Choice::Serve(1));
        assert_eq!(choose(&client, &devices, |i| i == 2), Choice::FacingDown(0));
    }

    #[test]
    fn one_device_serves_every_client_while_up() {
        let devices = [gid([169, 254, 77, 2])];
        for client in [gid([169, 254, 78, 1]), [0xfe; 16], [0; 16]] {
            assert_eq!(choose(&client, &devices, UP), Choice::Serve(0));
            assert_eq!(choose(&client, &devices, |_| false), Choice::FacingDown(0));
        }
    }

    #[test]
    fn no_device_is_no_choice() {
        assert_eq!(choose(&gid([10, 0, 0, 1]), &[], UP), Choice::NoDevice);
    }
}
