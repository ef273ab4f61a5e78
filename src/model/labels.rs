//! Label syntax as Kubernetes validates it: keys are qualified names (`[prefix/]name`), values are
//! short names. Used by label selectors, label index declarations and (on writes) object labels.
// Reads outside input (requests or stored values): it must not panic on any of it
// (design/reliability.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::string_slice,
        clippy::panic
    )
)]

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            b.first().is_some_and(u8::is_ascii_alphanumeric)
                && b.last().is_some_and(u8::is_ascii_alphanumeric)
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Validates a label key as a Kubernetes qualified name: `[prefix/]name`.
///
/// # Errors
/// A message saying what is wrong.
pub fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return Err(format!(
            "invalid label key \"{key}\": prefix part must be a lowercase DNS subdomain of at most 253 characters"
        ));
    }
    if name.len() > 63 || !is_name_part(name) {
        return Err(format!(
            "invalid label key \"{key}\": name part must be 1-63 characters of [A-Za-z0-9_.-], \
             starting and ending with an alphanumeric character"
        ));
    }
    Ok(())
}

/// Validates a label value: empty, or up to 63 characters of `[A-Za-z0-9_.-]` with alphanumeric ends.
///
/// # Errors
/// A message saying what is wrong.
pub(crate) fn validate_value(v: &str) -> Result<(), String> {
    if v.is_empty() || (v.len() <= 63 && is_name_part(v)) {
        Ok(())
    } else {
        Err(format!(
            "\"{v}\" must be at most 63 characters of [A-Za-z0-9_.-], starting and ending with an alphanumeric character"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_qualified_names_and_values_short_names() {
        for ok in ["app", "a.b-c_d", "example.com/app", "k8s.io/x"] {
            assert_eq!(validate_key(ok), Ok(()), "{ok}");
        }
        for bad in ["", "-a", "a-", "Example.com/app", "a/b/c", &"x".repeat(64)] {
            assert!(validate_key(bad).is_err(), "{bad}");
        }
        for ok in ["", "v1", "a.b_c-d", &"x".repeat(63)] {
            assert_eq!(validate_value(ok), Ok(()), "{ok}");
        }
        for bad in ["-", "a b", "é", &"x".repeat(64)] {
            assert!(validate_value(bad).is_err(), "{bad}");
        }
    }
}
