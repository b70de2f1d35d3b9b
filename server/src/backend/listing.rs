//! Paging over sorted keys for ListObjects v1/v2, ListObjectVersions and ListMultipartUploads.

/// One page of a listing.
#[derive(Debug, PartialEq, Eq)]
pub struct ListPage<T> {
    pub items: Vec<T>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    /// The last key or prefix of this page, to continue after (when truncated).
    pub next_after: Option<String>,
}

impl<T> Default for ListPage<T> {
    fn default() -> Self {
        ListPage {
            items: Vec::new(),
            common_prefixes: Vec::new(),
            is_truncated: false,
            next_after: None,
        }
    }
}

/// Page over items sorted ascending by `key_of`, all already starting with `prefix`:
/// skip keys `<= after`, group keys by `delimiter` after the prefix, stop at `max_keys` entries.
pub fn paginate<T>(
    sorted: Vec<T>,
    key_of: impl Fn(&T) -> &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max_keys: usize,
) -> ListPage<T> {
    let mut page = ListPage::default();
    // S3 answers max-keys=0 with an empty, untruncated page.
    if max_keys == 0 {
        return page;
    }
    let mut count = 0usize;
    for item in sorted {
        let key = key_of(&item).to_string();
        if let Some(after) = after {
            if key.as_str() <= after {
                continue;
            }
        }
        let group = delimiter.filter(|d| !d.is_empty()).and_then(|d| {
            let rest = key.get(prefix.len()..)?;
            rest.find(d)
                .map(|pos| key[..prefix.len() + pos + d.len()].to_string())
        });
        if let Some(group) = group {
            if page.common_prefixes.last() == Some(&group) {
                continue;
            }
            // A continuation that ended inside this group has already listed it.
            if after == Some(group.as_str()) {
                continue;
            }
            if count == max_keys {
                page.is_truncated = true;
                break;
            }
            page.next_after = Some(group.clone());
            page.common_prefixes.push(group);
        } else {
            if count == max_keys {
                page.is_truncated = true;
                break;
            }
            page.next_after = Some(key);
            page.items.push(item);
        }
        count += 1;
    }
    if !page.is_truncated {
        page.next_after = None;
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k<'a>(s: &'a &str) -> &'a str {
        s
    }

    fn keys<'a>(p: &ListPage<&'a str>) -> Vec<&'a str> {
        p.items.clone()
    }

    #[test]
    fn paginate_groups_and_pages() {
        let all = vec!["a/1", "a/2", "b", "c/x/1", "d"];
        let p = paginate(all.clone(), k, "", Some("/"), None, 1000);
        assert_eq!(p.common_prefixes, vec!["a/", "c/"]);
        assert_eq!(keys(&p), ["b", "d"]);
        assert!(!p.is_truncated);

        let p1 = paginate(all.clone(), k, "", Some("/"), None, 2);
        assert_eq!(p1.common_prefixes, vec!["a/"]);
        assert_eq!(p1.items.len(), 1);
        assert!(p1.is_truncated);
        assert_eq!(p1.next_after.as_deref(), Some("b"));
        let p2 = paginate(all.clone(), k, "", Some("/"), p1.next_after.as_deref(), 2);
        assert_eq!(p2.common_prefixes, vec!["c/"]);
        assert_eq!(keys(&p2), ["d"]);
        assert!(!p2.is_truncated);

        // Continuing right after a common prefix skips the rest of its group.
        let p3 = paginate(all.clone(), k, "", Some("/"), Some("a/"), 10);
        assert_eq!(p3.common_prefixes, vec!["c/"]);

        let under_c: Vec<&str> = all.into_iter().filter(|o| o.starts_with("c/")).collect();
        let p4 = paginate(under_c, k, "c/", Some("/"), None, 10);
        assert_eq!(p4.common_prefixes, vec!["c/x/"]);
    }
}
