//! Resource versions: the store revision (a `u64`), parsed once at the edge into a typed request form.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// What a request asked for in its `resourceVersion` parameter.
///
/// The three forms have different semantics (see `design/semantics.md`):
/// unset is a consistent read, `"0"` is "any version, the freshest cached one preferred", and `N` is
/// "not older than N" (or exactly N with [`RvMatch::Exact`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResourceVersion {
    /// No resourceVersion: the read must be consistent with the upstream's current revision.
    #[default]
    Unset,
    /// `"0"`: any version is acceptable; the cache answers from what it has, without waiting.
    Any,
    /// A specific revision (never 0).
    At(u64),
}

impl ResourceVersion {
    /// Parses the wire form. The empty string is [`ResourceVersion::Unset`].
    ///
    /// # Errors
    /// [`Error::BadRequest`] when the value is not an unsigned decimal integer.
    pub fn parse(s: &str) -> Result<Self, Error> {
        s.parse()
    }
}

impl FromStr for ResourceVersion {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        if s.is_empty() {
            return Ok(ResourceVersion::Unset);
        }
        // u64::from_str accepts a leading '+'; Kubernetes does not.
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::bad_request(format!(
                "invalid resource version \"{s}\": expected an unsigned decimal integer"
            )));
        }
        match s.parse::<u64>() {
            Ok(0) => Ok(ResourceVersion::Any),
            Ok(n) => Ok(ResourceVersion::At(n)),
            Err(_) => Err(Error::bad_request(format!(
                "invalid resource version \"{s}\": out of range for a 64-bit revision"
            ))),
        }
    }
}

impl fmt::Display for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResourceVersion::Unset => Ok(()),
            ResourceVersion::Any => f.write_str("0"),
            ResourceVersion::At(n) => write!(f, "{n}"),
        }
    }
}

/// The `resourceVersionMatch` parameter of a LIST.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RvMatch {
    /// The result may be at any revision not older than the requested one.
    NotOlderThan,
    /// The result must be exactly at the requested revision.
    Exact,
}

impl FromStr for RvMatch {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "NotOlderThan" => Ok(RvMatch::NotOlderThan),
            "Exact" => Ok(RvMatch::Exact),
            other => Err(Error::bad_request(format!(
                "invalid resourceVersionMatch \"{other}\": expected NotOlderThan or Exact"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(ResourceVersion::parse("").unwrap(), ResourceVersion::Unset);
        assert_eq!(ResourceVersion::parse("0").unwrap(), ResourceVersion::Any);
        assert_eq!(
            ResourceVersion::parse("42").unwrap(),
            ResourceVersion::At(42)
        );
        assert_eq!(ResourceVersion::At(42).to_string(), "42");
    }

    #[test]
    fn rejects_garbage_with_a_clear_message() {
        for bad in ["abc", "-1", "+5", "1.5", " 1", "99999999999999999999999"] {
            let err = ResourceVersion::parse(bad).unwrap_err();
            assert_eq!(err.code(), 400, "{bad}");
            assert!(err.to_string().contains(bad.trim()), "{err}");
        }
        assert!(
            "exact"
                .parse::<RvMatch>()
                .unwrap_err()
                .to_string()
                .contains("NotOlderThan or Exact")
        );
    }
}
