//! The identities the server knows (docs/protocol.md rule 9.1): a table of SigV4 access key -> secret
//! key, read from `--credentials FILE` and/or the single `--access-key` identity (its secret from
//! the environment, `HIPOBJ_SECRET_KEY`, or `--secret-key`), and served to s3s as its [`S3Auth`]
//! provider through [`Credentials`], which SIGHUP reloads.
//!
//! File format: one identity per line, `ACCESS_KEY SECRET_KEY` separated by spaces or tabs.
//! Blank lines and lines whose first non-blank character is `#` are ignored. Anything else (one
//! field, three fields, a duplicate access key, the reserved key `anonymous`) is an error naming
//! the file and line. A file that group or others may read (mode & 0o077), as ssh refuses a
//! private key, is refused with its mode and the fix (`chmod 600 FILE`).
//!
//! Secrets are never printed: [`Secret`]'s `Debug` is redacted, the tables' `Debug` lists access
//! keys only, and no error carries a secret (they name the file, the line and the access key).

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};

/// The identity of requests served with `--anonymous`; no access key may take this name.
pub const ANONYMOUS: &str = "anonymous";

/// The environment variable that gives `--access-key`'s secret (instead of `--secret-key`,
/// which every user of the host sees in `ps`).
pub const SECRET_KEY_ENV: &str = "HIPOBJ_SECRET_KEY";

/// A secret key: signed and checked with, never printed (`Debug` says `<redacted>`; no
/// `Display`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(secret: impl Into<String>) -> Self {
        Secret(secret.into())
    }

    /// The secret itself, for signing and checking only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret::new(s))
    }
}

/// Access keys and their secrets.
#[derive(Clone, Default)]
pub struct CredentialsTable {
    secrets: HashMap<String, Secret>,
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
    /// Group or others may read the file (its mode has bits of 0o077): refused as ssh refuses
    /// such a private key.
    Exposed { file: PathBuf, mode: u32 },
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
            CredentialsError::Exposed { file, mode } => write!(
                f,
                "credentials file {file} has mode {mode:04o}: group or others may read its \
                 secret keys; refusing it (as ssh refuses such a key): run `chmod 600 {file}`",
                file = file.display(),
            ),
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
    /// Read a credentials file; refused when group or others may read it (mode & 0o077: the
    /// mode of the file opened, so a rename between the check and the read changes nothing).
    pub fn from_file(file: &Path) -> Result<Self, CredentialsError> {
        let unreadable = |e: std::io::Error| CredentialsError::Unreadable {
            file: file.to_path_buf(),
            error: e.to_string(),
        };
        let mut opened = std::fs::File::open(file).map_err(unreadable)?;
        let mode = opened.metadata().map_err(unreadable)?.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(CredentialsError::Exposed {
                file: file.to_path_buf(),
                mode,
            });
        }
        let mut text = String::new();
        opened.read_to_string(&mut text).map_err(unreadable)?;
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
            .insert(access_key.to_string(), Secret::new(secret_key));
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
        self.secrets.get(access_key).map(Secret::expose)
    }

    /// What changed from `old` to `self`: access keys added, removed, and kept with another
    /// secret.
    pub fn changes_from(&self, old: &CredentialsTable) -> TableChanges {
        let added = self.secrets.keys().filter(|k| !old.contains(k)).count();
        let removed = old.secrets.keys().filter(|k| !self.contains(k)).count();
        let changed = self
            .secrets
            .iter()
            .filter(|(k, v)| old.secrets.get(*k).is_some_and(|o| o != *v))
            .count();
        TableChanges {
            identities: self.len(),
            added,
            removed,
            changed,
        }
    }

    fn lookup(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.secrets.get(access_key) {
            Some(secret) => Ok(SecretKey::from(secret.expose().to_string())),
            None => Err(s3_error!(InvalidAccessKeyId, "unknown access key")),
        }
    }
}

/// A table's changes on a reload (counts only: logged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableChanges {
    /// Identities in the new table.
    pub identities: usize,
    pub added: usize,
    pub removed: usize,
    /// Access keys kept with another secret.
    pub changed: usize,
}

#[async_trait::async_trait]
impl S3Auth for CredentialsTable {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.lookup(access_key)
    }
}

/// Where `--access-key`'s secret came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretFrom {
    /// `HIPOBJ_SECRET_KEY` ([`SECRET_KEY_ENV`]).
    Environment,
    /// `--secret-key`: on the command line, which every user of the host can read (`ps`,
    /// /proc/PID/cmdline) and shells keep in their history. Still taken, with a warning.
    CommandLine,
}

/// The one identity of `--access-key` (not from the file).
#[derive(Clone, Debug)]
pub struct SingleIdentity {
    pub access_key: String,
    pub secret: Secret,
    pub from: SecretFrom,
}

/// Where the identities come from: read at start, and again on each reload (SIGHUP).
#[derive(Clone, Debug, Default)]
pub struct CredentialsSource {
    /// `--credentials FILE`.
    pub file: Option<PathBuf>,
    /// `--access-key` with its secret: kept as it is across reloads (a process's environment and
    /// command line do not change), and checked against the file's keys each time.
    pub single: Option<SingleIdentity>,
}

impl CredentialsSource {
    /// The table these sources give now: the file read again, plus the single identity.
    pub fn load(&self) -> Result<CredentialsTable, CredentialsError> {
        let mut table = match &self.file {
            Some(file) => CredentialsTable::from_file(file)?,
            None => CredentialsTable::default(),
        };
        if let Some(single) = &self.single {
            table.insert(
                "--access-key",
                0,
                &single.access_key,
                single.secret.expose(),
            )?;
        }
        Ok(table)
    }
}

/// The identities the server serves with: one [`CredentialsTable`] behind an [`ArcSwap`], which
/// [`Credentials::reload`] replaces whole. Every SigV4 check (s3s asks [`S3Auth`] per request,
/// also on a keep-alive connection opened long before) and every gateway request to the store
/// ([`crate::backend::s3proxy::Keyring`]) reads the table current at that moment; what a
/// request already holds (a streaming PUT's store session, an RDMA transfer) it keeps until it
/// ends. Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Credentials {
    inner: Arc<Live>,
}

struct Live {
    table: ArcSwap<CredentialsTable>,
    source: CredentialsSource,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("table", &*self.inner.table.load())
            .field("source", &self.inner.source)
            .finish()
    }
}

impl Credentials {
    /// Read the sources once; a table of no identity is an error of the caller's (it decides
    /// whether that is allowed).
    pub fn load(source: CredentialsSource) -> Result<Credentials, CredentialsError> {
        let table = source.load()?;
        Ok(Credentials {
            inner: Arc::new(Live {
                table: ArcSwap::from_pointee(table),
                source,
            }),
        })
    }

    /// A table with no source to read again (tests; a reload keeps it as it is).
    pub fn fixed(table: CredentialsTable) -> Credentials {
        Credentials {
            inner: Arc::new(Live {
                table: ArcSwap::from_pointee(table),
                source: CredentialsSource::default(),
            }),
        }
    }

    /// The table now.
    pub fn current(&self) -> Arc<CredentialsTable> {
        self.inner.table.load_full()
    }

    pub fn source(&self) -> &CredentialsSource {
        &self.inner.source
    }

    /// Read the sources again and serve with what they give from the next check on; on any
    /// error (unreadable, open to group or others, malformed, duplicate, empty) the table in use
    /// stays. `Ok(None)`: there is no file to read again.
    pub fn reload(&self) -> Result<Option<TableChanges>, CredentialsError> {
        if self.inner.source.file.is_none() {
            return Ok(None);
        }
        let table = self.inner.source.load()?;
        let changes = table.changes_from(&self.inner.table.load());
        self.inner.table.store(Arc::new(table));
        Ok(Some(changes))
    }
}

#[async_trait::async_trait]
impl S3Auth for Credentials {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.inner.table.load().lookup(access_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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

    /// `text` in `dir/name` with `mode`.
    fn file_with_mode(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let file = dir.join(name);
        std::fs::write(&file, text).expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        file
    }

    #[test]
    fn a_file_group_or_others_may_read_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        for mode in [0o644, 0o640, 0o604, 0o660, 0o602, 0o620, 0o610, 0o601] {
            let file = file_with_mode(dir.path(), "creds", "alice s3cret-a\n", mode);
            let err = CredentialsTable::from_file(&file).expect_err("exposed");
            assert_eq!(
                err,
                CredentialsError::Exposed {
                    file: file.clone(),
                    mode
                },
                "{mode:o}"
            );
            let message = err.to_string();
            for want in [
                file.display().to_string(),
                format!("{mode:04o}"),
                format!("chmod 600 {}", file.display()),
            ] {
                assert!(message.contains(&want), "{want:?} in {message}");
            }
            assert!(!message.contains("s3cret"), "{message}");
        }
        for mode in [0o600, 0o400] {
            let file = file_with_mode(dir.path(), "creds", "alice s3cret-a\n", mode);
            let t = CredentialsTable::from_file(&file).expect("private file");
            assert!(t.contains("alice"), "{mode:o}");
        }
    }

    #[test]
    fn reload_swaps_the_table_and_a_bad_file_keeps_the_old_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = file_with_mode(dir.path(), "creds", "alice old-a\nbob b\n", 0o600);
        let live = Credentials::load(CredentialsSource {
            file: Some(file.clone()),
            single: Some(SingleIdentity {
                access_key: "carol".into(),
                secret: Secret::new("c"),
                from: SecretFrom::Environment,
            }),
        })
        .expect("load");
        let before = live.current();
        assert_eq!(before.len(), 3);
        file_with_mode(dir.path(), "creds", "alice new-a\ndave d\n", 0o600);
        let changes = live.reload().expect("reload").expect("a file to read");
        assert_eq!(
            changes,
            TableChanges {
                identities: 3,
                added: 1,
                removed: 1,
                changed: 1
            }
        );
        let now = live.current();
        assert_eq!(now.secret_of("alice"), Some("new-a"));
        assert_eq!(now.secret_of("bob"), None);
        assert_eq!(
            now.secret_of("carol"),
            Some("c"),
            "the single identity stays"
        );
        // What was taken before the reload is unchanged (a request in flight keeps its table).
        assert_eq!(before.secret_of("alice"), Some("old-a"));
        // Refused reloads: open to others, malformed, a key of the single identity, empty,
        // missing. Each keeps the table in use.
        for (text, mode) in [
            ("alice x\n", 0o644),
            ("alice x y\n", 0o600),
            ("carol x\n", 0o600),
            ("# none\n", 0o600),
        ] {
            file_with_mode(dir.path(), "creds", text, mode);
            assert!(live.reload().is_err(), "{text:?} {mode:o}");
            assert!(Arc::ptr_eq(&live.current(), &now), "{text:?} {mode:o}");
        }
        std::fs::remove_file(&file).expect("rm");
        assert!(matches!(
            live.reload(),
            Err(CredentialsError::Unreadable { .. })
        ));
        assert_eq!(live.current().secret_of("alice"), Some("new-a"));
        // No file: nothing to read again.
        let fixed = Credentials::fixed(parse("alice a\n").expect("valid"));
        assert_eq!(fixed.reload(), Ok(None));
        assert!(fixed.current().contains("alice"));
    }

    #[tokio::test]
    async fn s3s_is_served_the_table_current_at_each_check() {
        let dir = tempfile::tempdir().expect("tempdir");
        file_with_mode(dir.path(), "creds", "alice old-a\n", 0o600);
        let live = Credentials::load(CredentialsSource {
            file: Some(dir.path().join("creds")),
            single: None,
        })
        .expect("load");
        // As s3s holds it: one clone, made before the reload.
        let held = live.clone();
        assert_eq!(
            held.get_secret_key("alice").await.expect("known").expose(),
            "old-a"
        );
        file_with_mode(dir.path(), "creds", "bob b\n", 0o600);
        live.reload().expect("reload");
        assert!(held.get_secret_key("alice").await.is_err(), "removed");
        assert_eq!(held.get_secret_key("bob").await.expect("new").expose(), "b");
    }

    #[test]
    fn empty_and_unreadable_files_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = file_with_mode(dir.path(), "empty", "# nothing\n\n", 0o600);
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
