//! Reading the `x-amz-rdma-token` header value (docs/protocol.md section 2): exactly 88 hex digits,
//! optionally followed by the legacy `:<addr 16 hex>:<size 16 hex>` suffix, whose values must
//! equal the token's own remote address and length.

use hipobj::token::{Token, TOKEN_HEX_LEN};

/// The header value is malformed (answered with 400).
#[derive(Debug, PartialEq, Eq)]
pub struct MalformedToken(pub &'static str);

pub fn parse_token_header(value: &[u8]) -> Result<Token, MalformedToken> {
    let value = value.trim_ascii();
    let hex = value
        .get(..TOKEN_HEX_LEN)
        .ok_or(MalformedToken("shorter than 88 hex digits"))?;
    let token = Token::decode_hex(hex).map_err(|_| MalformedToken("not a token"))?;
    let suffix = &value[TOKEN_HEX_LEN..];
    if suffix.is_empty() {
        return Ok(token);
    }
    // ":" + 16 hex + ":" + 16 hex
    if suffix.len() != 34 || suffix[0] != b':' || suffix[17] != b':' {
        return Err(MalformedToken(
            "trailing bytes that are not a :addr:size suffix",
        ));
    }
    let addr =
        hex_u64(&suffix[1..17]).ok_or(MalformedToken("suffix address is not 16 hex digits"))?;
    let size =
        hex_u64(&suffix[18..34]).ok_or(MalformedToken("suffix size is not 16 hex digits"))?;
    if addr != token.remote_addr || size != token.length {
        return Err(MalformedToken("suffix disagrees with the token"));
    }
    Ok(token)
}

fn hex_u64(digits: &[u8]) -> Option<u64> {
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipobj::token::Transport;

    fn token() -> Token {
        Token {
            transport: Transport::Rc,
            qp_num: 0x11,
            gid: [3; 16],
            rkey: 0x22,
            remote_addr: 0x7f00_0000_1000,
            length: 4096,
            port: 1,
            lid: 0,
        }
    }

    #[test]
    fn plain_and_suffixed_tokens() {
        let hex = token().encode_hex();
        assert_eq!(parse_token_header(hex.as_bytes()), Ok(token()));
        assert_eq!(
            parse_token_header(hex.to_uppercase().as_bytes()),
            Ok(token())
        );
        let suffixed = format!("{hex}:{:016x}:{:016x}", 0x7f00_0000_1000u64, 4096u64);
        assert_eq!(parse_token_header(suffixed.as_bytes()), Ok(token()));
    }

    #[test]
    fn malformed_tokens() {
        let hex = token().encode_hex();
        for bad in [
            String::new(),
            hex[..87].to_string(),
            format!("{hex}0"),
            format!("{}zz", &hex[..86]),
            format!("{hex}:{:016x}:{:016x}", 0x7f00_0000_2000u64, 4096u64),
            format!("{hex}:{:016x}:{:016x}", 0x7f00_0000_1000u64, 4097u64),
            format!("{hex}:{:x}:{:x}", 0x7f00_0000_1000u64, 4096u64),
            format!("ff{}", &hex[2..]),
        ] {
            assert!(parse_token_header(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
