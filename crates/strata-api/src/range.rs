//! The `Range` request header (RFC 9110 §14) as both strata servers read
//! it: the daemon's file route (`GET /v1/workspaces/{id}/files`) and
//! `strata serve`'s `cat`. One parser, so the two answer a range alike.

/// A range that starts at or past the end of the file: 416, with
/// `Content-Range: bytes */SIZE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsatisfiable;

/// One `bytes=` range of a `size`-byte file as `[start, end)`: `Ok(None)`
/// for no header or one this does not serve (several ranges, another
/// unit, a malformed one: RFC 9110 §14.2 lets a server ignore those and
/// send the whole file), [`Unsatisfiable`] for a range that starts past
/// the end (or a suffix range of an empty file).
pub fn parse_range(h: Option<&str>, size: u64) -> Result<Option<(u64, u64)>, Unsatisfiable> {
    let Some(spec) = h.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((a, b)) = spec.split_once('-') else {
        return Ok(None);
    };
    let (a, b) = (a.trim(), b.trim());
    let range = if a.is_empty() {
        let Ok(n) = b.parse::<u64>() else {
            return Ok(None);
        };
        if n == 0 || size == 0 {
            return Err(Unsatisfiable);
        }
        (size.saturating_sub(n), size)
    } else {
        let Ok(start) = a.parse::<u64>() else {
            return Ok(None);
        };
        let end = if b.is_empty() {
            size
        } else {
            match b.parse::<u64>() {
                Ok(e) if e >= start => e.saturating_add(1).min(size),
                _ => return Ok(None),
            }
        };
        if start >= size {
            return Err(Unsatisfiable);
        }
        (start, end)
    };
    Ok(Some(range))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_like_rfc_9110() {
        assert_eq!(parse_range(None, 10), Ok(None));
        assert_eq!(parse_range(Some("bytes=2-4"), 10), Ok(Some((2, 5))));
        assert_eq!(parse_range(Some(" bytes=2-4 "), 10), Ok(Some((2, 5))));
        assert_eq!(parse_range(Some("bytes=2-"), 10), Ok(Some((2, 10))));
        assert_eq!(parse_range(Some("bytes=-3"), 10), Ok(Some((7, 10))));
        assert_eq!(parse_range(Some("bytes=-30"), 10), Ok(Some((0, 10))));
        assert_eq!(parse_range(Some("bytes=5-100"), 10), Ok(Some((5, 10))));
        assert_eq!(parse_range(Some("bytes=10-"), 10), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("bytes=-0"), 10), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("bytes=-1"), 0), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("bytes=0-"), 0), Err(Unsatisfiable));
        assert_eq!(parse_range(Some("bytes=0-1,3-4"), 10), Ok(None));
        assert_eq!(parse_range(Some("bytes=4-2"), 10), Ok(None));
        assert_eq!(parse_range(Some("bytes=x-2"), 10), Ok(None));
        assert_eq!(parse_range(Some("bytes=2"), 10), Ok(None));
        assert_eq!(parse_range(Some("lines=1-2"), 10), Ok(None));
        assert_eq!(
            parse_range(Some("bytes=0-18446744073709551615"), 10),
            Ok(Some((0, 10)))
        );
    }
}
