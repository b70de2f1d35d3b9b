//! Which bytes of an object an RDMA GET moves (docs/protocol.md section 4, rule 4): the whole object
//! or the part its `Range` selects, and never more than the client's buffer (the token length).
//! Pure, so the fuzz target `server_range` compiles this file on its own.

use std::ops::Range;

/// Why nothing can be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectionError {
    /// The Range selects no byte of the object (416).
    NotSatisfiable,
    /// The selected bytes do not fit the client's buffer (400).
    BufferTooSmall { selected: u64, buffer: u64 },
}

/// The byte range to send for an object of `object_size` bytes, with an optional `Range`
/// header, into a client buffer of `buffer_len` bytes. The result lies within the object.
pub fn select_bytes(
    range: Option<&s3s::dto::Range>,
    object_size: u64,
    buffer_len: u64,
) -> Result<Range<u64>, SelectionError> {
    let selected = match range {
        None => 0..object_size,
        Some(r) => r
            .check(object_size)
            .map_err(|_| SelectionError::NotSatisfiable)?,
    };
    let len = selected.end.saturating_sub(selected.start);
    if len > buffer_len {
        return Err(SelectionError::BufferTooSmall {
            selected: len,
            buffer: buffer_len,
        });
    }
    Ok(selected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::dto::Range as HttpRange;

    fn parsed(h: &str) -> HttpRange {
        HttpRange::parse(h).expect("valid Range")
    }

    #[test]
    fn whole_object_and_ranges() {
        assert_eq!(select_bytes(None, 100, 100), Ok(0..100));
        assert_eq!(
            select_bytes(Some(&parsed("bytes=10-19")), 100, 10),
            Ok(10..20)
        );
        assert_eq!(
            select_bytes(Some(&parsed("bytes=90-")), 100, 10),
            Ok(90..100)
        );
        assert_eq!(select_bytes(Some(&parsed("bytes=-5")), 100, 5), Ok(95..100));
        // The last position is clamped to the object.
        assert_eq!(
            select_bytes(Some(&parsed("bytes=95-500")), 100, 5),
            Ok(95..100)
        );
        assert_eq!(
            select_bytes(Some(&parsed("bytes=-500")), 100, 100),
            Ok(0..100)
        );
    }

    #[test]
    fn unsatisfiable_and_too_big() {
        assert_eq!(
            select_bytes(Some(&parsed("bytes=100-")), 100, 100),
            Err(SelectionError::NotSatisfiable)
        );
        assert_eq!(
            select_bytes(Some(&parsed("bytes=0-0")), 0, 100),
            Err(SelectionError::NotSatisfiable)
        );
        assert_eq!(
            select_bytes(None, 100, 99),
            Err(SelectionError::BufferTooSmall {
                selected: 100,
                buffer: 99
            })
        );
        assert_eq!(
            select_bytes(Some(&parsed("bytes=0-9")), 100, 9),
            Err(SelectionError::BufferTooSmall {
                selected: 10,
                buffer: 9
            })
        );
    }
}
