//! Sizes and rates as people write and read them.

/// "4096", "4K", "1M", "2G" (powers of 1024; a trailing "iB"/"B" is allowed).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 4K, 16M)"))?;
    n.checked_mul(1u64 << shift)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("{s:?}: size out of range"))
}

/// 4096 -> "4KiB", 16777216 -> "16MiB", other values in bytes.
pub fn size_text(n: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{}{unit}", n >> shift);
        }
    }
    format!("{n}B")
}

/// MB/s (10^6 bytes per second).
pub fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

/// "FIRST-LAST" or "FIRST-" of an object of `size` bytes -> (first, last) inclusive.
pub fn parse_range(s: &str, size: u64) -> Result<(u64, u64), String> {
    let bad = || format!("--range {s:?}: expected FIRST-LAST or FIRST- (bytes, inclusive)");
    let (a, b) = s
        .trim()
        .trim_start_matches("bytes=")
        .split_once('-')
        .ok_or_else(bad)?;
    let first: u64 = a.parse().map_err(|_| bad())?;
    let last: u64 = if b.is_empty() {
        size.saturating_sub(1)
    } else {
        b.parse().map_err(|_| bad())?
    };
    if first > last || last >= size {
        return Err(format!(
            "--range {s:?} is outside the {size} bytes of the source"
        ));
    }
    Ok((first, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert_eq!(size_text(4096), "4KiB");
        assert_eq!(size_text(16 << 20), "16MiB");
        assert_eq!(size_text(1000), "1000B");
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("10-19", 100), Ok((10, 19)));
        assert_eq!(parse_range("90-", 100), Ok((90, 99)));
        assert_eq!(parse_range("bytes=0-0", 1), Ok((0, 0)));
        assert!(parse_range("5-4", 100).is_err());
        assert!(parse_range("0-100", 100).is_err());
        assert!(parse_range("a-b", 100).is_err());
    }
}
