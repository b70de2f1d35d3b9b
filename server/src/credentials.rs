//! The identities the server knows (docs/protocol.md rule 9.1): a table of SigV4 access key -> secret
//! key, read from `--credentials FILE` and/or the single `--access-key`/`--secret-key` pair, and
//! served to s3s as its [`S3Auth`] provider.
//!
//! File format: one identity per line, `ACCESS_KEY SECRET_KEY` separated by spaces or tabs.
//! Blank lines and lines whose first non-blank character is `#` are ignored. Anything else (one
//! field, three fields, a duplicate access key, the reserved key `anonymous`) is an error naming
//! the file and line.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};

/// The identity of requests served with `--anonymous`; no access key may take this name.
pub const ANONYMOUS: &str = "anonymous";

/// Access keys and their secrets.
#[derive(Clone, Default)]
pub struct CredentialsTable {
    secrets: HashMap<String, String>,
}

impl fmt::Debug for CredentialsTable {
    // Never print secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut keys: Vec<&String> = self.secrets.keys().collect();
        keys.sort();
        f.debug_struct("CredentialsTable")
            .field("access_keys", &keys)
            .finish()
    }
}

/// Why a credentials file (or flag pair) was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum CredentialsError {
    /// The file could not be read.
    Unreadable { file: PathBuf, error: String },
    /// A line is not `ACCESS_KEY SECRET_KEY`.
    Malformed {
        file: PathBuf,
        line: usize,
        why: &'static str,
    },
    /// The same access key twice (`line` is the second one; `source` names where the first was).
    Duplicate {
        source: String,
        line: usize,
        access_key: String,
    },
    /// `anonymous` is the identity of anonymous serving, not an access key.
    Reserved { source: String, line: usize },
    /// No identity at all.
    Empty { file: PathBuf },
}

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialsError::Unreadable { file, error } => {
                write!(
                    f,
                    "cannot read credentials file {}: {error}",
                    file.display()
                )
            }
            CredentialsError::Malformed { file, line, why } => write!(
                f,
                "{}:{line}: {why} (expected `ACCESS_KEY SECRET_KEY`)",
                file.display()
            ),
            CredentialsError::Duplicate {
                source,
                line,
                access_key,
            } => write!(f, "{source}:{line}: duplicate access key {access_key:?}"),
            CredentialsError::Reserved { source, line } => write!(
                f,
                "{source}:{line}: access key {ANONYMOUS:?} is reserved for anonymous serving"
            ),
            CredentialsError::Empty { file } => {
                write!(f, "{}: no credentials in the file", file.display())
            }
        }
    }
}

impl std::error::Error for CredentialsError {}

impl CredentialsTable {
    /// Read a credentials file.
    pub fn from_file(file: &Path) -> Result<Self, CredentialsError> {
        let text = std::fs::read_to_string(file).map_err(|e| CredentialsError::Unreadable {
            file: file.to_path_buf(),
            error: e.to_string(),
        })?;
        let table = Self::parse(file, &text)?;
        if table.is_empty() {
            return Err(CredentialsError::Empty {
                file: file.to_path_buf(),
            });
        }
        Ok(table)
    }

    /// Parse the text of a credentials file; `file` names it in errors.
    pub fn parse(file: &Path, text: &str) -> Result<Self, CredentialsError> {
        let mut table = CredentialsTable::default();
        let source = file.display().to_string();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.trim();
            if content.is_empty() || content.starts_with('#') {
                continue;
            }
            let mut fields = content.split_ascii_whitespace();
            let malformed = |why| CredentialsError::Malformed {
                file: file.to_path_buf(),
                line,
                why,
            };
            let (Some(access), Some(secret)) = (fields.next(), fields.next()) else {
                return Err(malformed("only one field"));
            };
            if fields.next().is_some() {
                return Err(malformed("more than two fields"));
            }
            if !access.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(malformed("access key is not printable ASCII"));
            }
            table.insert(&source, line, access, secret)?;
        }
        Ok(table)
    }

    /// Add one identity; `source`/`line` name where it came from for errors.
    pub fn insert(
        &mut self,
        source: &str,
        line: usize,
        access_key: &str,
        secret_key: &str,
    ) -> Result<(), CredentialsError> {
        if access_key == ANONYMOUS {
            return Err(CredentialsError::Reserved {
                source: source.to_string(),
                line,
            });
        }
        if self.secrets.contains_key(access_key) {
            return Err(CredentialsError::Duplicate {
                source: source.to_string(),
                line,
                access_key: access_key.to_string(),
            });
        }
        self.secrets
            .insert(access_key.to_string(), secret_key.to_string());
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    pub fn contains(&self, access_key: &str) -> bool {
        self.secrets.contains_key(access_key)
    }

    /// The secret of `access_key` (gateway mode signs its requests to the store with it).
    pub fn secret_of(&self, access_key: &str) -> Option<&str> {
        self.secrets.get(access_key).map(String::as_str)
    }
}

#[async_trait::async_trait]
impl S3Auth for CredentialsTable {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.secrets.get(access_key) {
            Some(secret) => Ok(SecretKey::from(secret.clone())),
            None => Err(s3_error!(InvalidAccessKeyId, "unknown access key")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<CredentialsTable, CredentialsError> {
        CredentialsTable::parse(Path::new("creds"), text)
    }

    #[test]
    fn comments_blank_lines_and_tabs() {
        let t = parse("# team keys\n\nalice  s3cret-a\n  bob\tsecret/b+c \n   # bob above\n")
            .expect("valid");
        assert_eq!(t.len(), 2);
        assert!(t.contains("alice") && t.contains("bob"));
        let dbg = format!("{t:?}");
        assert!(!dbg.contains("s3cret"), "secrets never printed: {dbg}");
    }

    #[test]
    fn each_malformed_kind_names_its_line() {
        let cases: [(&str, CredentialsError); 4] = [
            (
                "alice a\nbob\n",
                CredentialsError::Malformed {
                    file: "creds".into(),
                    line: 2,
                    why: "only one field",
                },
            ),
            (
                "# c\nalice a extra\n",
                CredentialsError::Malformed {
                    file: "creds".into(),
                    line: 2,
                    why: "more than two fields",
                },
            ),
            (
                "alice a\n\nalice b\n",
                CredentialsError::Duplicate {
                    source: "creds".into(),
                    line: 3,
                    access_key: "alice".into(),
                },
            ),
            (
                "anonymous x\n",
                CredentialsError::Reserved {
                    source: "creds".into(),
                    line: 1,
                },
            ),
        ];
        for (text, want) in cases {
            let got = parse(text).expect_err(text);
            assert_eq!(got, want, "{text:?}");
            assert!(got.to_string().starts_with("creds:"), "{got}");
        }
    }

    #[test]
    fn empty_and_unreadable_files_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "# nothing\n\n").expect("write");
        assert!(matches!(
            CredentialsTable::from_file(&empty),
            Err(CredentialsError::Empty { .. })
        ));
        assert!(matches!(
            CredentialsTable::from_file(&dir.path().join("missing")),
            Err(CredentialsError::Unreadable { .. })
        ));
    }

    #[tokio::test]
    async fn serves_secrets_to_s3s() {
        let t = parse("alice secret-a\n").expect("valid");
        let key = t.get_secret_key("alice").await.expect("known");
        assert_eq!(key.expose(), "secret-a");
        assert!(t.get_secret_key("mallory").await.is_err());
    }
}
