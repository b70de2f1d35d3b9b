//! The few S3 XML answers the proxy backend reads (listings, multipart ids), with `roxmltree`.

use std::time::SystemTime;

use super::super::StorageError;

fn bad_xml(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageError::Io(std::io::Error::other(format!(
        "backend store sent bad {what} XML: {e}"
    )))
}

/// A parsed answer; elements are found by local name (any namespace).
pub struct Doc {
    text: String,
}

/// One element's children, by local name.
pub struct Elem<'a, 'i> {
    node: roxmltree::Node<'a, 'i>,
}

impl Doc {
    pub fn new(text: String) -> Doc {
        Doc { text }
    }

    /// The root element (checked to be `root`).
    pub fn parse<T>(
        &self,
        root: &str,
        f: impl FnOnce(Elem<'_, '_>) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let doc = roxmltree::Document::parse(&self.text).map_err(|e| bad_xml(root, e))?;
        let node = doc.root_element();
        if node.tag_name().name() != root {
            return Err(bad_xml(root, format!("root is {}", node.tag_name().name())));
        }
        f(Elem { node })
    }
}

impl<'a, 'i> Elem<'a, 'i> {
    /// Child elements named `name`.
    pub fn all(&self, name: &'static str) -> impl Iterator<Item = Elem<'a, 'i>> + 'a {
        self.node
            .children()
            .filter(move |c| c.is_element() && c.tag_name().name() == name)
            .map(|node| Elem { node })
    }

    pub fn child(&self, name: &'static str) -> Option<Elem<'a, 'i>> {
        self.all(name).next()
    }

    /// Text of child `name` ("" when it is missing or empty).
    pub fn text(&self, name: &'static str) -> String {
        self.child(name)
            .and_then(|c| c.node.text().map(str::to_string))
            .unwrap_or_default()
    }

    pub fn number(&self, name: &'static str) -> Result<u64, StorageError> {
        self.text(name).trim().parse().map_err(|e| bad_xml(name, e))
    }

    /// An ISO 8601 timestamp child; the epoch when missing or unreadable.
    pub fn time(&self, name: &'static str) -> SystemTime {
        let t = self.text(name);
        s3s::dto::Timestamp::parse(s3s::dto::TimestampFormat::DateTime, t.trim())
            .ok()
            .map(|ts| SystemTime::from(time::OffsetDateTime::from(ts)))
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }

    pub fn flag(&self, name: &'static str) -> bool {
        self.text(name).trim() == "true"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_listing() {
        let doc = Doc::new(
            r#"<?xml version="1.0"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
            <IsTruncated>true</IsTruncated><NextContinuationToken>t1</NextContinuationToken>
            <Contents><Key>a&amp;b</Key><Size>12</Size><ETag>"e"</ETag>
            <LastModified>2026-12-01T08:00:00.000Z</LastModified></Contents></ListBucketResult>"#
                .into(),
        );
        doc.parse("ListBucketResult", |root| {
            assert!(root.flag("IsTruncated"));
            assert_eq!(root.text("NextContinuationToken"), "t1");
            let c: Vec<_> = root.all("Contents").collect();
            assert_eq!(c.len(), 1);
            assert_eq!(c[0].text("Key"), "a&b");
            assert_eq!(c[0].number("Size").unwrap(), 12);
            assert!(c[0].time("LastModified") > SystemTime::UNIX_EPOCH);
            Ok(())
        })
        .unwrap();
        assert!(doc.parse("Other", |_| Ok(())).is_err());
    }
}
