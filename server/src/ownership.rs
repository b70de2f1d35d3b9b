//! Bucket ownership (PROTOCOL.md rule 9.1): a bucket belongs to the identity that created it.
//! The owner is kept beside the bucket's objects in `<bucket>/.owner` (one line: the access key,
//! or `anonymous`; no object file name starts with a dot), so a restart keeps it.
//!
//! A bucket directory without an owner file (made by a server before revision 2, or caught
//! between its `mkdir` and the owner write) belongs to no identity: every identity gets 403 on
//! it. An operator adopts such a bucket by writing the access key into its `.owner` file.

use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;

use crate::identity::Identity;
use crate::storage::{Storage, StorageError, StorageResult};

/// File name of the owner record inside a bucket directory.
pub const OWNER_FILE: &str = ".owner";

/// Who owns a bucket, as far as the disk says.
#[derive(Debug, PartialEq, Eq)]
pub enum Ownership {
    /// No such bucket.
    NoBucket,
    /// The bucket exists but names no owner.
    Unowned,
    Owner(Identity),
}

impl Ownership {
    pub fn is(&self, identity: &Identity) -> bool {
        matches!(self, Ownership::Owner(o) if o == identity)
    }
}

fn owner_path(storage: &Storage, bucket: &str) -> StorageResult<PathBuf> {
    Ok(storage.existing_bucket_dir(bucket)?.join(OWNER_FILE))
}

/// Read a bucket's owner.
pub fn owner_of(storage: &Storage, bucket: &str) -> io::Result<Ownership> {
    let path = match owner_path(storage, bucket) {
        Ok(p) => p,
        Err(StorageError::NoSuchBucket) => return Ok(Ownership::NoBucket),
        Err(StorageError::Io(e)) => return Err(e),
        Err(e) => return Err(io::Error::other(e.to_string())),
    };
    match fs::read_to_string(&path) {
        Ok(text) => match text.trim() {
            "" => Ok(Ownership::Unowned),
            name => Ok(Ownership::Owner(Identity::new(name))),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Ownership::Unowned),
        Err(e) => Err(e),
    }
}

/// Create `bucket` owned by `owner`. If the owner cannot be recorded the bucket is removed
/// again, so a failed call leaves nothing behind.
pub fn create_owned_bucket(storage: &Storage, bucket: &str, owner: &Identity) -> StorageResult<()> {
    storage.create_bucket(bucket)?;
    if let Err(e) = write_owner(storage, bucket, owner) {
        if let Err(undo) = storage.delete_bucket(bucket) {
            tracing::warn!(bucket, error = %undo, "removing a bucket whose owner was not recorded failed");
        }
        return Err(e);
    }
    Ok(())
}

fn write_owner(storage: &Storage, bucket: &str, owner: &Identity) -> StorageResult<()> {
    let path = owner_path(storage, bucket)?;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    writeln!(file, "{owner}")?;
    file.sync_all()?;
    Ok(())
}

/// The names of the buckets `identity` owns (ListBuckets shows only these).
pub fn own_buckets(
    storage: &Storage,
    identity: &Identity,
) -> StorageResult<Vec<(String, std::time::SystemTime)>> {
    let mut out = Vec::new();
    for (name, created) in storage.list_buckets()? {
        if owner_of(storage, &name)?.is(identity) {
            out.push((name, created));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_is_recorded_and_survives_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let alice = Identity::new("alice");
        {
            let s = Storage::open(dir.path()).expect("storage");
            assert_eq!(owner_of(&s, "b").expect("read"), Ownership::NoBucket);
            create_owned_bucket(&s, "b", &alice).expect("create");
            s.create_bucket("legacy").expect("create");
        }
        let s = Storage::open(dir.path()).expect("storage");
        assert!(owner_of(&s, "b").expect("read").is(&alice));
        assert!(!owner_of(&s, "b").expect("read").is(&Identity::new("bob")));
        assert_eq!(owner_of(&s, "legacy").expect("read"), Ownership::Unowned);
        let own: Vec<String> = own_buckets(&s, &alice)
            .expect("list")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(own, ["b"]);
        // The owner file is not an object, and does not keep the bucket from being deleted.
        assert!(s.list_objects("b", "").expect("list").is_empty());
        s.delete_bucket("b").expect("delete");
    }

    #[test]
    fn a_second_create_does_not_change_the_owner() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Storage::open(dir.path()).expect("storage");
        let alice = Identity::new("alice");
        create_owned_bucket(&s, "b", &alice).expect("create");
        assert!(matches!(
            create_owned_bucket(&s, "b", &Identity::new("bob")),
            Err(StorageError::BucketAlreadyExists)
        ));
        assert!(owner_of(&s, "b").expect("read").is(&alice));
    }
}
