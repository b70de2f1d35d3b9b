//! The `x-amz-rdma-token` codec (docs/protocol.md section 2): 44 little-endian bytes, 88 hex digits.
//! Pure and strict: wrong length, non-hex input, or a transport byte other than 0 or 1 is rejected.

use std::fmt;
use std::net::Ipv4Addr;

/// Binary length of a token.
pub const TOKEN_LEN: usize = 44;
/// Length of its hex form.
pub const TOKEN_HEX_LEN: usize = 88;

/// Revision 4 (docs/protocol.md section 11 and 11.A): the high bit of
/// the port byte. In a client token: "this QP keeps zero-length receives posted; end the transfer
/// with a SEND_WITH_INV of the token's rkey". In a `200` reply's server token: "I did". Port
/// numbers stay below 128; revision-3 servers and clients never read the other side's port
/// byte, so they ignore the bit.
pub const PORT_FLAG_REMOTE_INV: u8 = 0x80;

/// The transport byte.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    Dc = 0,
    Rc = 1,
}

/// One decoded token. The same layout serves client tokens and the server token in replies
/// (where `rkey` carries the starting PSN and `lid` the pairing id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Token {
    pub transport: Transport,
    pub qp_num: u32,
    pub gid: [u8; 16],
    pub rkey: u32,
    pub remote_addr: u64,
    pub length: u64,
    pub port: u8,
    /// LID field; in this protocol the pairing id (0 = unpaired).
    pub lid: u16,
}

/// Why a token was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// Not exactly 88 hex digits (or 44 bytes).
    Length(usize),
    /// A character that is not a hex digit, at this index.
    NotHex(usize),
    /// Transport byte other than 0 (DC) or 1 (RC).
    Transport(u8),
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenError::Length(n) => write!(
                f,
                "token has length {n}, expected {TOKEN_HEX_LEN} hex digits"
            ),
            TokenError::NotHex(i) => write!(f, "token character {i} is not a hex digit"),
            TokenError::Transport(t) => {
                write!(f, "token transport byte {t:#04x} is neither DC nor RC")
            }
        }
    }
}

impl std::error::Error for TokenError {}

impl Token {
    /// The 44-byte wire form.
    pub fn to_bytes(&self) -> [u8; TOKEN_LEN] {
        let mut b = [0u8; TOKEN_LEN];
        b[0] = self.transport as u8;
        b[1..5].copy_from_slice(&self.qp_num.to_le_bytes());
        b[5..21].copy_from_slice(&self.gid);
        b[21..25].copy_from_slice(&self.rkey.to_le_bytes());
        b[25..33].copy_from_slice(&self.remote_addr.to_le_bytes());
        b[33..41].copy_from_slice(&self.length.to_le_bytes());
        b[41] = self.port;
        b[42..44].copy_from_slice(&self.lid.to_le_bytes());
        b
    }

    /// Decode the 44-byte wire form; any other length is rejected.
    pub fn from_bytes(b: &[u8]) -> Result<Token, TokenError> {
        let b: &[u8; TOKEN_LEN] = b.try_into().map_err(|_| TokenError::Length(b.len()))?;
        let transport = match b[0] {
            0 => Transport::Dc,
            1 => Transport::Rc,
            t => return Err(TokenError::Transport(t)),
        };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[5..21]);
        Ok(Token {
            transport,
            qp_num: u32::from_le_bytes([b[1], b[2], b[3], b[4]]),
            gid,
            rkey: u32::from_le_bytes([b[21], b[22], b[23], b[24]]),
            remote_addr: u64::from_le_bytes(b[25..33].try_into().unwrap_or([0; 8])),
            length: u64::from_le_bytes(b[33..41].try_into().unwrap_or([0; 8])),
            port: b[41],
            lid: u16::from_le_bytes([b[42], b[43]]),
        })
    }

    /// Lowercase hex, exactly 88 characters.
    pub fn encode_hex(&self) -> String {
        hex::encode(self.to_bytes())
    }

    /// Lowercase hex into `out`, without allocating (a transfer's token for `sendRequest`).
    pub fn encode_hex_into<'a>(&self, out: &'a mut [u8; TOKEN_HEX_LEN]) -> &'a str {
        let written = hex::encode_to_slice(self.to_bytes(), out);
        debug_assert!(written.is_ok(), "88 hex digits fit 88 bytes");
        // Hex digits are ASCII; an encoding failure (impossible: the lengths match) leaves zeros.
        std::str::from_utf8(out).unwrap_or_default()
    }

    /// Decode exactly 88 hex digits (either case). Nothing may follow them.
    pub fn decode_hex(s: &[u8]) -> Result<Token, TokenError> {
        if s.len() != TOKEN_HEX_LEN {
            return Err(TokenError::Length(s.len()));
        }
        let mut b = [0u8; TOKEN_LEN];
        if hex::decode_to_slice(s, &mut b).is_err() {
            // Only now look for where (a reply is parsed on every transfer: one pass when valid).
            let i = s.iter().position(|c| !c.is_ascii_hexdigit()).unwrap_or(0);
            return Err(TokenError::NotHex(i));
        }
        Token::from_bytes(&b)
    }

    /// Whether the token carries [`PORT_FLAG_REMOTE_INV`].
    pub fn remote_inv(&self) -> bool {
        self.port & PORT_FLAG_REMOTE_INV != 0
    }

    /// The token with [`PORT_FLAG_REMOTE_INV`] set or cleared.
    pub fn with_remote_inv(self, on: bool) -> Token {
        let port = if on {
            self.port | PORT_FLAG_REMOTE_INV
        } else {
            self.port & !PORT_FLAG_REMOTE_INV
        };
        Token { port, ..self }
    }

    /// The port number without the flag bit.
    pub fn port_number(&self) -> u8 {
        self.port & !PORT_FLAG_REMOTE_INV
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`: bytes 0-9 zero, 10-11 0xff).
    pub fn client_nic_ipv4(&self) -> Option<Ipv4Addr> {
        gid_ipv4(&self.gid)
    }
}

/// The IPv4 address carried by an IPv4-mapped GID, checking all of bytes 0-11.
pub fn gid_ipv4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    if gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff {
        Some(Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
    } else {
        None
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// docs/protocol.md section 2's worked example.
    const EXAMPLE_HEX: &str =
        "015500000000000000000000000000ffffc0a864c83412000000100000007f00000010000000000000010000";

    fn example() -> Token {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[192, 168, 100, 200]);
        Token {
            transport: Transport::Rc,
            qp_num: 0x55,
            gid,
            rkey: 0x1234,
            remote_addr: 0x7f00_0000_1000,
            length: 4096,
            port: 1,
            lid: 0,
        }
    }

    #[test]
    fn worked_example_encodes_exactly() {
        assert_eq!(EXAMPLE_HEX.len(), TOKEN_HEX_LEN);
        assert_eq!(example().encode_hex(), EXAMPLE_HEX);
        let mut text = [0u8; TOKEN_HEX_LEN];
        assert_eq!(example().encode_hex_into(&mut text), EXAMPLE_HEX);
        assert_eq!(Token::decode_hex(EXAMPLE_HEX.as_bytes()), Ok(example()));
        assert_eq!(
            example().client_nic_ipv4(),
            Some(Ipv4Addr::new(192, 168, 100, 200))
        );
    }

    #[test]
    fn remote_inv_flag_is_the_port_bytes_high_bit() {
        let t = example();
        assert!(!t.remote_inv());
        let flagged = t.with_remote_inv(true);
        assert!(flagged.remote_inv());
        assert_eq!(flagged.port_number(), 1);
        assert_eq!(flagged.to_bytes()[41], 0x81);
        assert_eq!(
            Token::decode_hex(flagged.encode_hex().as_bytes()),
            Ok(flagged)
        );
        assert_eq!(flagged.with_remote_inv(false), t);
        let mut bytes = t.to_bytes();
        bytes[41] = 0x81;
        assert!(Token::from_bytes(&bytes).is_ok_and(|d| d.remote_inv()));
    }

    #[test]
    fn field_offsets_are_little_endian() {
        let t = Token {
            transport: Transport::Dc,
            qp_num: 0x0403_0201,
            gid: core::array::from_fn(|i| 0x10 + i as u8),
            rkey: 0x2423_2221,
            remote_addr: 0x3837_3635_3433_3231,
            length: 0x4847_4645_4443_4241,
            port: 0x51,
            lid: 0x6261,
        };
        let b = t.to_bytes();
        assert_eq!(b[0], 0);
        assert_eq!(&b[1..5], &[1, 2, 3, 4]);
        assert_eq!(b[5], 0x10);
        assert_eq!(b[20], 0x1f);
        assert_eq!(&b[21..25], &[0x21, 0x22, 0x23, 0x24]);
        assert_eq!(b[25], 0x31);
        assert_eq!(b[32], 0x38);
        assert_eq!(b[33], 0x41);
        assert_eq!(b[40], 0x48);
        assert_eq!(b[41], 0x51);
        assert_eq!(&b[42..44], &[0x61, 0x62]);
        assert_eq!(Token::from_bytes(&b), Ok(t));
    }

    #[test]
    fn accepts_upper_and_mixed_case() {
        let upper = EXAMPLE_HEX.to_ascii_uppercase();
        assert_eq!(Token::decode_hex(upper.as_bytes()), Ok(example()));
        let mixed: String = EXAMPLE_HEX
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        assert_eq!(Token::decode_hex(mixed.as_bytes()), Ok(example()));
        // The encoder is lowercase.
        assert!(!example()
            .encode_hex()
            .bytes()
            .any(|c| c.is_ascii_uppercase()));
    }

    #[test]
    fn rejects_malformed_hex() {
        let e = EXAMPLE_HEX;
        let cases: Vec<(String, TokenError)> = vec![
            (String::new(), TokenError::Length(0)),
            (e[..87].to_string(), TokenError::Length(87)),
            (format!("{e}0"), TokenError::Length(89)),
            (
                format!("{e}:00007f0000001000:0000000000001000"),
                TokenError::Length(122),
            ),
            (format!("{e}\n"), TokenError::Length(89)),
            ("g".repeat(88), TokenError::NotHex(0)),
            (format!("{}x", &e[..87]), TokenError::NotHex(87)),
            (format!(" {}", &e[1..]), TokenError::NotHex(0)),
            (
                format!("{}\0{}", &e[..10], &e[11..]),
                TokenError::NotHex(10),
            ),
            (format!("02{}", &e[2..]), TokenError::Transport(2)),
            (format!("ff{}", &e[2..]), TokenError::Transport(0xff)),
            (format!("80{}", &e[2..]), TokenError::Transport(0x80)),
        ];
        for (input, want) in cases {
            assert_eq!(
                Token::decode_hex(input.as_bytes()),
                Err(want),
                "input {input:?}"
            );
        }
        // Signs and the "0x" prefix are not hex digits either.
        let plus = format!("+{}", &e[1..]);
        assert!(matches!(
            Token::decode_hex(plus.as_bytes()),
            Err(TokenError::NotHex(0))
        ));
    }

    #[test]
    fn dc_transport_is_decoded() {
        let dc = format!("00{}", &EXAMPLE_HEX[2..]);
        assert_eq!(
            Token::decode_hex(dc.as_bytes()).map(|t| t.transport),
            Ok(Transport::Dc)
        );
    }

    #[test]
    fn rejects_wrong_binary_lengths() {
        let b = example().to_bytes();
        assert_eq!(Token::from_bytes(&b[..43]), Err(TokenError::Length(43)));
        let mut long = b.to_vec();
        long.push(0);
        assert_eq!(Token::from_bytes(&long), Err(TokenError::Length(45)));
        assert_eq!(Token::from_bytes(&[]), Err(TokenError::Length(0)));
    }

    #[test]
    fn ipv4_mapped_gid_needs_all_of_bytes_0_to_11() {
        let mut gid = example().gid;
        assert_eq!(gid_ipv4(&gid), Some(Ipv4Addr::new(192, 168, 100, 200)));
        for i in 0..10 {
            let mut g = gid;
            g[i] = 1;
            assert_eq!(gid_ipv4(&g), None, "byte {i} set");
        }
        for i in [10, 11] {
            let mut g = gid;
            g[i] = 0xfe;
            assert_eq!(gid_ipv4(&g), None, "byte {i} not 0xff");
        }
        gid[12..].copy_from_slice(&[0, 0, 0, 0]);
        assert_eq!(gid_ipv4(&gid), Some(Ipv4Addr::UNSPECIFIED));
        // A link-local RoCE v1/v2 IPv6 GID.
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[15] = 1;
        assert_eq!(gid_ipv4(&ll), None);
    }

    #[test]
    fn errors_display() {
        assert!(TokenError::Length(3).to_string().contains('3'));
        assert!(TokenError::NotHex(5).to_string().contains('5'));
        assert!(TokenError::Transport(2).to_string().contains("0x02"));
    }

    pub(crate) fn any_token() -> impl Strategy<Value = Token> {
        (
            prop_oneof![Just(Transport::Dc), Just(Transport::Rc)],
            any::<u32>(),
            any::<[u8; 16]>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u8>(),
            any::<u16>(),
        )
            .prop_map(
                |(transport, qp_num, gid, rkey, remote_addr, length, port, lid)| Token {
                    transport,
                    qp_num,
                    gid,
                    rkey,
                    remote_addr,
                    length,
                    port,
                    lid,
                },
            )
    }

    proptest! {
        #[test]
        fn hex_round_trip(t in any_token()) {
            let hex = t.encode_hex();
            prop_assert_eq!(hex.len(), TOKEN_HEX_LEN);
            prop_assert_eq!(Token::decode_hex(hex.as_bytes()), Ok(t));
            prop_assert_eq!(Token::decode_hex(hex.to_ascii_uppercase().as_bytes()), Ok(t));
        }

        #[test]
        fn bytes_round_trip(t in any_token()) {
            prop_assert_eq!(Token::from_bytes(&t.to_bytes()), Ok(t));
        }

        #[test]
        fn valid_binary_round_trips(mut b in any::<[u8; TOKEN_LEN]>(), rc in any::<bool>()) {
            b[0] = u8::from(rc);
            let t = Token::from_bytes(&b);
            prop_assert!(t.is_ok());
            prop_assert_eq!(t.map(|t| t.to_bytes()), Ok(b));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Token::decode_hex(&bytes);
            let _ = Token::from_bytes(&bytes);
        }

        #[test]
        fn decode_of_88_hexlike_chars_never_panics(s in "[0-9a-fA-Fg]{88}") {
            match Token::decode_hex(s.as_bytes()) {
                Ok(t) => prop_assert_eq!(t.encode_hex(), s.to_ascii_lowercase()),
                Err(e) => prop_assert!(matches!(e, TokenError::NotHex(_) | TokenError::Transport(_))),
            }
        }
    }
}
