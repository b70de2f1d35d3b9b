//! Presigned URL rules s3s 0.14 leaves to the server: SigV4 allows `X-Amz-Expires` up to seven
//! days; a longer one is refused as AWS does (400 AuthorizationQueryParametersError). An expired
//! URL is already refused by s3s (403 AccessDenied).

use s3s::{S3Error, S3ErrorCode, S3Result};

/// Longest presigned URL validity SigV4 allows, in seconds.
pub const MAX_EXPIRES_SECS: u64 = 7 * 24 * 3600;

/// Refuse a presigned URL whose `X-Amz-Expires` exceeds seven days.
pub fn check_expiry(uri: &http::Uri) -> S3Result<()> {
    let Some(query) = uri.query() else {
        return Ok(());
    };
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "X-Amz-Expires" {
            continue;
        }
        let too_long = value.parse::<u64>().map_or(true, |v| v > MAX_EXPIRES_SECS);
        if too_long {
            let mut err = S3Error::with_message(
                S3ErrorCode::Custom("AuthorizationQueryParametersError".into()),
                "X-Amz-Expires must be less than a week (in seconds) that is 604800",
            );
            err.set_status_code(http::StatusCode::BAD_REQUEST);
            return Err(err);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seven_days_is_the_limit() {
        let ok: http::Uri = "/b/k?X-Amz-Expires=604800&X-Amz-Signature=x"
            .parse()
            .expect("uri");
        assert!(check_expiry(&ok).is_ok());
        let long: http::Uri = "/b/k?X-Amz-Expires=609901".parse().expect("uri");
        let err = check_expiry(&long).expect_err("too long");
        assert_eq!(err.status_code(), Some(http::StatusCode::BAD_REQUEST));
        assert!(check_expiry(&"/b/k".parse().expect("uri")).is_ok());
    }
}
