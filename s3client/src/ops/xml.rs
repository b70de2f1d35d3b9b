//! The S3 XML answers the operations read, with `roxmltree` (elements found by local name, in
//! any namespace; entities decoded), and text escaped for the XML bodies they send.

use std::fmt;

/// An answer that is not the XML it should be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XmlError {
    /// The root element expected, or the element being read.
    pub what: String,
    pub why: String,
}

impl XmlError {
    fn new(what: &str, why: impl fmt::Display) -> XmlError {
        XmlError {
            what: what.to_owned(),
            why: why.to_string(),
        }
    }
}

impl fmt::Display for XmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad {} XML: {}", self.what, self.why)
    }
}

impl std::error::Error for XmlError {}

/// One element of an answer, read by its children's local names.
pub struct Element<'a, 'i> {
    node: roxmltree::Node<'a, 'i>,
}

/// `visit` the root element of `body`, which must be named `root`.
pub fn read<T, E: From<XmlError>>(
    body: &[u8],
    root: &str,
    visit: impl FnOnce(Element<'_, '_>) -> Result<T, E>,
) -> Result<T, E> {
    let text = std::str::from_utf8(body).map_err(|e| XmlError::new(root, e))?;
    let doc = roxmltree::Document::parse(text).map_err(|e| XmlError::new(root, e))?;
    let node = doc.root_element();
    if node.tag_name().name() != root {
        let why = format!("root is {}", node.tag_name().name());
        return Err(XmlError::new(root, why).into());
    }
    visit(Element { node })
}

impl<'a, 'i> Element<'a, 'i> {
    /// Child elements named `name`.
    pub fn all(&self, name: &'static str) -> impl Iterator<Item = Element<'a, 'i>> + 'a {
        self.node
            .children()
            .filter(move |c| c.is_element() && c.tag_name().name() == name)
            .map(|node| Element { node })
    }

    pub fn child(&self, name: &'static str) -> Option<Element<'a, 'i>> {
        self.all(name).next()
    }

    /// Text of child `name` ("" when it is missing or empty).
    pub fn text(&self, name: &'static str) -> String {
        self.child(name)
            .and_then(|c| c.node.text().map(str::to_string))
            .unwrap_or_default()
    }

    /// Child `name` as a whole number.
    pub fn number(&self, name: &'static str) -> Result<u64, XmlError> {
        let text = self.text(name);
        text.trim().parse().map_err(|e| XmlError::new(name, e))
    }

    /// Child `name` is `true`.
    pub fn flag(&self, name: &'static str) -> bool {
        self.text(name).trim() == "true"
    }
}

/// `text` as XML character data (`&`, `<` and `>` escaped; quotes may stand in element text).
pub fn escape_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = r#"<?xml version="1.0"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
        <IsTruncated>true</IsTruncated><NextContinuationToken>t1</NextContinuationToken>
        <Contents><Key>a&amp;b</Key><Size>12</Size><ETag>"e"</ETag></Contents></ListBucketResult>"#;

    #[test]
    fn a_namespaced_answer_is_read_by_local_names() {
        read(LISTING.as_bytes(), "ListBucketResult", |root| {
            assert!(root.flag("IsTruncated"));
            assert_eq!(root.text("NextContinuationToken"), "t1");
            let c: Vec<_> = root.all("Contents").collect();
            assert_eq!(c.len(), 1);
            assert_eq!(c[0].text("Key"), "a&b");
            assert_eq!(c[0].number("Size"), Ok(12));
            assert_eq!(c[0].text("Missing"), "");
            Ok::<_, XmlError>(())
        })
        .expect("read");
    }

    #[test]
    fn another_root_or_no_xml_is_an_error() {
        let other = read(LISTING.as_bytes(), "Other", |_| Ok::<_, XmlError>(()));
        assert_eq!(
            other.map_err(|e| e.to_string()),
            Err("bad Other XML: root is ListBucketResult".into())
        );
        assert!(read(b"not xml", "R", |_| Ok::<_, XmlError>(())).is_err());
        assert!(read(&[0xff, 0xfe], "R", |_| Ok::<_, XmlError>(())).is_err());
        let bad_number = read(b"<R><Size>x</Size></R>", "R", |r| r.number("Size"));
        assert!(bad_number.is_err());
    }

    #[test]
    fn text_is_escaped_for_an_xml_body() {
        assert_eq!(escape_text("a&b<c>\"d\""), "a&amp;b&lt;c&gt;\"d\"");
        let body = format!("<R><K>{}</K></R>", escape_text("x & <y>"));
        let back = read(body.as_bytes(), "R", |r| Ok::<_, XmlError>(r.text("K")));
        assert_eq!(back, Ok("x & <y>".to_string()));
    }
}
