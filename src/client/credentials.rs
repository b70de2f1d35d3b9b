//! Who signs the requests, in the AWS SDKs' order: the keys the caller gives (the command line's
//! `--access-key/--secret-key`), else `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` (+
//! `AWS_SESSION_TOKEN`), else the profile (given, `AWS_PROFILE`, or `default`) of
//! `~/.aws/credentials` (`AWS_SHARED_CREDENTIALS_FILE`). None of them: unsigned requests (a server
//! that serves anonymously). Region: given, `AWS_REGION`, `AWS_DEFAULT_REGION`, else `us-east-1`.

use crate::client::failure::Failure;
use std::path::PathBuf;

/// What the caller gives before the environment and the profile files are read (the command
/// line's flags; the batch API's settings). Every field is optional.
#[derive(Clone, Debug, Default)]
pub struct CredentialSources {
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    /// A profile of the shared credentials file (else `AWS_PROFILE`, else `default`).
    pub profile: Option<String>,
    pub region: Option<String>,
    /// The only roots an https endpoint's certificate may chain to (else `AWS_CA_BUNDLE`).
    pub ca_bundle: Option<PathBuf>,
}

/// Keys that sign requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    pub access_key: String,
    pub secret_key: String,
    pub session_token: Option<String>,
    /// Where they came from (for messages): "flags", "environment" or "profile NAME".
    pub source: String,
}

/// The signing identity and region of every request.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub keys: Option<Keys>,
    pub region: String,
    /// `--ca-bundle` or AWS_CA_BUNDLE: the only roots an https endpoint's certificate may chain
    /// to (`None`: the system's).
    pub ca_bundle: Option<PathBuf>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn credentials_file() -> Option<PathBuf> {
    env("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".aws/credentials")))
}

/// The keys of `profile` in an AWS credentials file's text.
fn keys_from_profile(text: &str, profile: &str) -> Result<Option<Keys>, String> {
    let ini = ini::Ini::load_from_str(text).map_err(|e| e.to_string())?;
    let Some(section) = ini.section(Some(profile)) else {
        return Ok(None);
    };
    match (
        section.get("aws_access_key_id"),
        section.get("aws_secret_access_key"),
    ) {
        (Some(a), Some(s)) => Ok(Some(Keys {
            access_key: a.to_owned(),
            secret_key: s.to_owned(),
            session_token: section.get("aws_session_token").map(str::to_owned),
            source: format!("profile {profile}"),
        })),
        _ => Err(format!(
            "profile {profile} lacks aws_access_key_id or aws_secret_access_key"
        )),
    }
}

fn resolve_keys(args: &CredentialSources) -> Result<Option<Keys>, Failure> {
    match (&args.access_key, &args.secret_key) {
        (Some(a), Some(s)) => {
            return Ok(Some(Keys {
                access_key: a.clone(),
                secret_key: s.clone(),
                session_token: None,
                source: "flags".into(),
            }))
        }
        (None, None) => {}
        _ => {
            return Err(Failure::Usage(
                "give both --access-key and --secret-key".into(),
            ))
        }
    }
    if args.profile.is_none() {
        if let (Some(a), Some(s)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            return Ok(Some(Keys {
                access_key: a,
                secret_key: s,
                session_token: env("AWS_SESSION_TOKEN"),
                source: "environment".into(),
            }));
        }
    }
    let explicit = args.profile.clone().or_else(|| env("AWS_PROFILE"));
    let profile = explicit.clone().unwrap_or_else(|| "default".into());
    let Some(path) = credentials_file() else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(_) if explicit.is_none() => return Ok(None),
        Err(e) => {
            return Err(Failure::Usage(format!(
                "profile {profile}: cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let keys = keys_from_profile(&text, &profile)
        .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?;
    if keys.is_none() && explicit.is_some() {
        return Err(Failure::Usage(format!(
            "no profile {profile} in {}",
            path.display()
        )));
    }
    Ok(keys)
}

pub fn resolve(args: &CredentialSources) -> Result<Credentials, Failure> {
    let region = args
        .region
        .clone()
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".into());
    Ok(Credentials {
        keys: resolve_keys(args)?,
        region,
        ca_bundle: args
            .ca_bundle
            .clone()
            .or_else(|| env("AWS_CA_BUNDLE").map(PathBuf::from)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "[default]\naws_access_key_id = AK1\naws_secret_access_key = SK1\n\n\
                        [lab]\naws_access_key_id=AK2\naws_secret_access_key=SK2\naws_session_token=T\n\
                        [broken]\naws_access_key_id=AK3\n";

    #[test]
    fn profiles_are_read_by_name() {
        let d = keys_from_profile(FILE, "default").unwrap().unwrap();
        assert_eq!(
            (d.access_key.as_str(), d.secret_key.as_str()),
            ("AK1", "SK1")
        );
        let l = keys_from_profile(FILE, "lab").unwrap().unwrap();
        assert_eq!(l.session_token.as_deref(), Some("T"));
        assert_eq!(l.source, "profile lab");
        assert!(keys_from_profile(FILE, "none").unwrap().is_none());
        assert!(keys_from_profile(FILE, "broken").is_err());
    }

    #[test]
    fn flags_win_and_must_come_in_pairs() {
        let args = CredentialSources {
            access_key: Some("A".into()),
            secret_key: Some("S".into()),
            profile: None,
            region: Some("eu-west-1".into()),
            ca_bundle: Some("/ca.pem".into()),
        };
        let c = resolve(&args).unwrap();
        assert_eq!(
            c.ca_bundle.as_deref(),
            Some(std::path::Path::new("/ca.pem"))
        );
        assert_eq!(c.keys.unwrap().source, "flags");
        assert_eq!(c.region, "eu-west-1");
        let half = CredentialSources {
            secret_key: None,
            ..args
        };
        assert!(matches!(resolve(&half), Err(Failure::Usage(_))));
    }
}
