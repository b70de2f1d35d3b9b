//! The one ACL this server has: the caller owns what it can reach (bucket ownership across
//! identities is enforced by the access layer before any op runs), with FULL_CONTROL. GetObjectAcl
//! and GetBucketAcl report exactly that; listings name the same owner.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::HipobjS3;

/// The requesting identity as an S3 owner (its access key; `anonymous` without authentication).
pub(super) fn owner_of<T>(req: &S3Request<T>) -> Owner {
    let id = req
        .credentials
        .as_ref()
        .map_or_else(|| "anonymous".to_string(), |c| c.access_key.clone());
    Owner {
        display_name: Some(id.clone()),
        id: Some(id),
    }
}

fn full_control(owner: &Owner) -> Grants {
    vec![Grant {
        grantee: Some(Grantee {
            display_name: owner.display_name.clone(),
            email_address: None,
            id: owner.id.clone(),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }]
}

impl HipobjS3 {
    pub(super) async fn object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        if req.input.version_id.as_deref().is_some_and(|v| v != "null") {
            return Err(s3_error!(NoSuchVersion));
        }
        let owner = owner_of(&req);
        let (b, k) = (req.input.bucket, req.input.key);
        self.blocking(move |s| s.head_object(&b, &k)).await?;
        Ok(S3Response::new(GetObjectAclOutput {
            grants: Some(full_control(&owner)),
            owner: Some(owner),
            ..Default::default()
        }))
    }

    pub(super) async fn bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        let owner = owner_of(&req);
        let b = req.input.bucket;
        self.blocking(move |s| s.head_bucket(&b)).await?;
        Ok(S3Response::new(GetBucketAclOutput {
            grants: Some(full_control(&owner)),
            owner: Some(owner),
        }))
    }
}
