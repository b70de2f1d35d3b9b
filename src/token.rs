//! The `x-amz-rdma-token` codec (PROTOCOL.md section 2): 44 little-endian bytes, 88 hex digits.
//! Pure and strict: wrong length, non-hex input, or a transport byte other than 0 or 1 is rejected.

use std::fmt;
use std::net::Ipv4Addr;

/// Binary length of a token.
pub const TOKEN_LEN: usize = 44;
/// Length of its hex form.
pub const TOKEN_HEX_LEN: usize = 88;

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

    /// Decode exactly 88 hex digits (either case). Nothing may follow them.
    pub fn decode_hex(s: &[u8]) -> Result<Token, TokenError> {
        if s.len() != TOKEN_HEX_LEN {
            return Err(TokenError::Length(s.len()));
        }
        if let Some(i) = s.iter().position(|c| !c.is_ascii_hexdigit()) {
            return Err(TokenError::NotHex(i));
        }
        let mut b = [0u8; TOKEN_LEN];
        hex::decode_to_slice(s, &mut b).map_err(|_| TokenError::NotHex(0))?;
        Token::from_bytes(&b)
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
