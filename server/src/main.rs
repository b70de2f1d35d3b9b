fn main() {
    let _ = s3s::service::S3ServiceBuilder::new;
}
