//! Bucket ownership (docs/protocol.md rule 9.1): a bucket belongs to the identity that created it.
//! The owner is recorded by the storage seam (`Backend::set_bucket_owner`; the fs backend keeps
//! it in `<bucket>/.owner`, one line: the access key, or `anonymous`), so a restart keeps it.
//!
//! A bucket without an owner record (made by a server before revision 2, or caught between its
//! creation and the owner write) belongs to no identity: every identity gets 403 on it. An
//! operator adopts such a bucket by writing the access key into its `.owner` file.

use std::io;

use crate::backend::{Backend, BucketInfo, StorageError, StorageResult};
use crate::identity::Identity;

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

/// Read a bucket's owner.
pub fn owner_of(storage: &dyn Backend, bucket: &str) -> io::Result<Ownership> {
    match storage.bucket_owner(bucket) {
        Ok(Some(name)) => Ok(Ownership::Owner(Identity::new(&name))),
        Ok(None) => Ok(Ownership::Unowned),
        Err(StorageError::NoSuchBucket) => Ok(Ownership::NoBucket),
        Err(StorageError::Io(e)) => Err(e),
        Err(e) => Err(io::Error::other(e.to_string())),
    }
}

/// Create `bucket` owned by `owner`. If the owner cannot be recorded the bucket is removed
/// again, so a failed call leaves nothing behind.
pub fn create_owned_bucket(
    storage: &dyn Backend,
    bucket: &str,
    owner: &Identity,
) -> StorageResult<()> {
    storage.create_bucket(bucket)?;
    if let Err(e) = storage.set_bucket_owner(bucket, &owner.to_string()) {
        if let Err(undo) = storage.delete_bucket(bucket) {
            tracing::warn!(bucket, error = %undo, "removing a bucket whose owner was not recorded failed");
        }
        return Err(e);
    }
    Ok(())
}

/// The buckets `identity` owns (ListBuckets shows only these).
pub fn own_buckets(storage: &dyn Backend, identity: &Identity) -> StorageResult<Vec<BucketInfo>> {
    let mut out = Vec::new();
    for bucket in storage.list_buckets()? {
        if owner_of(storage, &bucket.name)?.is(identity) {
            out.push(bucket);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::FsBackend;

    #[test]
    fn owner_is_recorded_and_survives_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let alice = Identity::new("alice");
        {
            let s = FsBackend::open(dir.path()).expect("storage");
            assert_eq!(owner_of(&s, "b").expect("read"), Ownership::NoBucket);
            create_owned_bucket(&s, "b", &alice).expect("create");
            s.create_bucket("legacy").expect("create");
        }
        let s = FsBackend::open(dir.path()).expect("storage");
        assert!(owner_of(&s, "b").expect("read").is(&alice));
        assert!(!owner_of(&s, "b").expect("read").is(&Identity::new("bob")));
        assert_eq!(owner_of(&s, "legacy").expect("read"), Ownership::Unowned);
        let own: Vec<String> = own_buckets(&s, &alice)
            .expect("list")
            .into_iter()
            .map(|b| b.name)
            .collect();
        assert_eq!(own, ["b"]);
        // The owner file is not an object, and does not keep the bucket from being deleted.
        assert!(s.list_objects("b", "").expect("list").is_empty());
        s.delete_bucket("b").expect("delete");
    }

    #[test]
    fn a_second_create_does_not_change_the_owner() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = FsBackend::open(dir.path()).expect("storage");
        let alice = Identity::new("alice");
        create_owned_bucket(&s, "b", &alice).expect("create");
        assert!(matches!(
            create_owned_bucket(&s, "b", &Identity::new("bob")),
            Err(StorageError::BucketAlreadyExists)
        ));
        assert!(owner_of(&s, "b").expect("read").is(&alice));
    }
}
