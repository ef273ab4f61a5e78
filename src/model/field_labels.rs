//! Which field selectors a resource accepts: kube-apiserver's field label conversion
//! (`AddFieldLabelConversionFunc` in `pkg/apis/*/v1/conversion.go`, or the default one that
//! accepts `metadata.name` and `metadata.namespace`), with its error message, its renamed labels
//! (a pod's `spec.host` is `spec.nodeName`) and the value a field reads when the object leaves it
//! out (a pod's `spec.hostNetwork` is `false`, as the registry's `GetAttrs` sets it).
//!
//! A definition that declares none (a custom resource of the user's) accepts any field path: a
//! watchcache extension, as declared indexes on custom resources are.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::FieldPath;
use crate::model::selector::FieldSelector;

/// The field selectors a resource accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLabels {
    /// The accepted labels, after renaming.
    pub fields: Vec<String>,
    /// Labels accepted that read another field path: (label, the path). A pod's `spec.host`
    /// reads `spec.nodeName`; an event's `source` reads `source.component`.
    pub aliases: Vec<(String, String)>,
    /// The value a field reads when the object leaves it out (Go's zero value as the registry's
    /// field set writes it: `false`, `0`).
    pub defaults: Vec<(String, String)>,
    /// Fields that read another path when the object leaves them out or empty: an event's
    /// `source.component` reads `reportingComponent` then, as kube-apiserver's field set
    /// (`ToSelectableFields`) falls back to the reporting controller, so that `source=X` finds an
    /// event an events.k8s.io client wrote with `reportingController: X`.
    pub fallbacks: Vec<(String, String)>,
    /// The 400 message for any other label, `{label}` standing for it.
    pub error: String,
}

/// The labels of upstream's default conversion (`runtime.DefaultMetaV1FieldSelectorConversion`).
const DEFAULT_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

/// Its message.
const DEFAULT_ERROR: &str =
    r#""{label}" is not a known field selector: only "metadata.name", "metadata.namespace""#;

/// The message most kinds' own conversion functions use.
const CUSTOM_ERROR: &str = "field label not supported: {label}";

/// `field_selectors` as written in a definition file: `"default"`, or a table.
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum RawFieldLabels {
    Keyword(String),
    Table {
        fields: Vec<String>,
        #[serde(default)]
        aliases: BTreeMap<String, String>,
        #[serde(default)]
        defaults: BTreeMap<String, String>,
        #[serde(default)]
        fallbacks: BTreeMap<String, String>,
        #[serde(default)]
        error: Option<String>,
    },
}

impl RawFieldLabels {
    pub(crate) fn compile(self) -> Result<FieldLabels, String> {
        let labels = match self {
            RawFieldLabels::Keyword(k) if k == "default" => FieldLabels {
                fields: DEFAULT_FIELDS.iter().map(|f| (*f).to_owned()).collect(),
                aliases: Vec::new(),
                defaults: Vec::new(),
                fallbacks: Vec::new(),
                error: DEFAULT_ERROR.into(),
            },
            RawFieldLabels::Keyword(k) => {
                return Err(format!(
                    "field_selectors = \"{k}\": write \"default\" (metadata.name and metadata.namespace) or a table with `fields`"
                ));
            }
            RawFieldLabels::Table {
                fields,
                aliases,
                defaults,
                fallbacks,
                error,
            } => FieldLabels {
                fields,
                aliases: aliases.into_iter().collect(),
                defaults: defaults.into_iter().collect(),
                fallbacks: fallbacks.into_iter().collect(),
                error: error.unwrap_or_else(|| CUSTOM_ERROR.into()),
            },
        };
        for f in labels
            .fields
            .iter()
            .chain(labels.aliases.iter().map(|(a, _)| a))
        {
            FieldPath::parse(f).map_err(|m| format!("field_selectors: {m}"))?;
        }
        for to in labels
            .aliases
            .iter()
            .chain(&labels.fallbacks)
            .flat_map(|(a, b)| [a, b])
        {
            FieldPath::parse(to).map_err(|m| format!("field_selectors: {m}"))?;
        }
        for (f, _) in &labels.defaults {
            if !labels.fields.contains(f) {
                return Err(format!(
                    "field_selectors: a default for {f}, which is not among `fields`"
                ));
            }
        }
        if !labels.error.contains("{label}") {
            return Err("field_selectors: `error` must hold {label}".into());
        }
        Ok(labels)
    }
}

impl FieldLabels {
    /// Whether a field selector on `path` is accepted (after renaming).
    pub fn accepts(&self, path: &str) -> bool {
        self.fields.iter().any(|f| f == path)
    }

    /// The value `path` reads when the object leaves it out, if upstream gives it one.
    pub fn default_of(&self, path: &str) -> Option<&str> {
        self.defaults
            .iter()
            .find(|(f, _)| f == path)
            .map(|(_, v)| v.as_str())
    }

    /// The path `path` reads when the object leaves it out or empty, if any.
    pub fn fallback_of(&self, path: &str) -> Option<&str> {
        self.fallbacks
            .iter()
            .find(|(f, _)| f == path)
            .map(|(_, v)| v.as_str())
    }

    /// Upstream's conversion of a selector: each label renamed when it is an alias, and the first
    /// one not accepted refused with upstream's message.
    ///
    /// # Errors
    /// The 400 message for the first label not accepted.
    pub fn convert(&self, sel: &FieldSelector) -> Result<FieldSelector, String> {
        sel.map_paths(|path| {
            if let Some((_, to)) = self.aliases.iter().find(|(a, _)| a == path.as_str()) {
                return FieldPath::parse(to).map_err(|m| m.to_string());
            }
            if self.accepts(path.as_str()) {
                Ok(path.clone())
            } else {
                Err(self.error.replace("{label}", path.as_str()))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(toml_text: &str) -> Result<FieldLabels, String> {
        #[derive(Deserialize)]
        struct W {
            field_selectors: RawFieldLabels,
        }
        toml::from_str::<W>(toml_text)
            .map_err(|e| e.to_string())
            .and_then(|w| w.field_selectors.compile())
    }

    #[test]
    fn the_default_conversion_accepts_name_and_namespace_with_upstreams_message() {
        let l = labels("field_selectors = \"default\"").unwrap();
        let ok = FieldSelector::parse("metadata.name=a,metadata.namespace!=b").unwrap();
        assert_eq!(l.convert(&ok).unwrap(), ok);
        let e = l
            .convert(&FieldSelector::parse("data.a=1").unwrap())
            .unwrap_err();
        assert_eq!(
            e,
            r#""data.a" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        assert!(labels("field_selectors = \"all\"").is_err());
    }

    #[test]
    fn aliases_rename_and_defaults_are_kept() {
        let l = labels(
            r#"[field_selectors]
fields = ["metadata.name", "spec.nodeName", "spec.hostNetwork"]
aliases = { "spec.host" = "spec.nodeName" }
defaults = { "spec.hostNetwork" = "false" }
"#,
        )
        .unwrap();
        let converted = l
            .convert(&FieldSelector::parse("spec.host=n1").unwrap())
            .unwrap();
        assert_eq!(converted.to_string(), "spec.nodeName=n1");
        assert_eq!(l.default_of("spec.hostNetwork"), Some("false"));
        assert_eq!(
            l.convert(&FieldSelector::parse("spec.foo=1").unwrap())
                .unwrap_err(),
            "field label not supported: spec.foo"
        );
        assert!(
            labels("[field_selectors]\nfields = [\"a\"]\naliases = { \"b\" = \"c..d\" }")
                .unwrap_err()
                .contains("c..d")
        );
        assert!(
            labels("[field_selectors]\nfields = [\"a\"]\nerror = \"no\"")
                .unwrap_err()
                .contains("{label}")
        );
    }
}
