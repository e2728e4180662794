//! The `settings_section!` macro: one declarative table per flat scenario section, from which the
//! raw serde mirror, the resolved plan struct, defaults with their reasons, range checks, the
//! resolved-YAML writer and the docs key table are all derived (see `trainer_keys.rs`).
//!
//! A row reads like documentation:
//!
//! ```text
//! /// What the key means (becomes the field docs and the docs table's "meaning" column).
//! key: PlanType = default_expr, kind "integer ≥ 1", why "where the default comes from"
//!     [, shown "text"]   // the docs' default column when the default is not a constant
//!     [, check fn]       // a range check: fn(key, &value) -> Option<Bad>
//!     [, only Cond];     // the key matters only when Cond holds (else: warned, not written)
//! ```
//!
//! `default_expr` may name the keys above it (`train_batch_size` defaults to
//! `rollout_buffer_size`). A plan type `Option<T>` makes `key: null` mean `None` (not "default").
//! Sub-mappings that need code of their own (`external_transition`) go in the `nested` block:
//! `key: RawType => PlanType, kind "...", shown "...", via resolve_fn, emit to_raw_fn;`.
//! A check function must not share a name with a key above it (the keys are local variables).
use crate::collect::Diags;
use crate::positions::KeyPath;
use serde::{Deserialize, Deserializer, Serialize};

/// One key of a scenario section, as the docs table shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyDoc {
    /// The key, as written under its section.
    pub key: &'static str,
    /// The accepted values, in words (`integer ≥ 1`).
    pub kind: &'static str,
    /// The default in markdown: `` `20` `` as a scenario writes it, or words for computed ones.
    pub default: String,
    /// Why that default: where it comes from.
    pub why: &'static str,
    /// What the key means (its doc comment, lines joined).
    pub doc: String,
}

impl KeyDoc {
    /// A row of the docs table; `doc` is the row's `///` lines (joined by `doc_text`).
    pub(crate) fn row(
        key: &'static str,
        kind: &'static str,
        default: String,
        why: &'static str,
        doc: &[&str],
    ) -> KeyDoc {
        KeyDoc {
            key,
            kind,
            default,
            why,
            doc: doc_text(doc),
        }
    }
}

/// A failed range check: what is wrong and what to write instead.
pub(crate) struct Bad {
    pub message: String,
    pub hint: String,
}

/// The condition under which a setting matters (e.g. multi-turn only).
pub(crate) trait Relevance<P> {
    /// Whether the setting has an effect in this plan (`has_eval`: `dataset.eval` is set).
    fn holds(&self, plan: &P, has_eval: bool) -> bool;
    /// The warning for a setting written where it has no effect; `None`: no warning.
    fn moot_warning(&self) -> Option<&'static str>;
}

/// What a section's resolver is given about the rest of the scenario.
pub(crate) trait SectionContext {
    /// Whether `dataset.eval` is set.
    fn has_eval(&self) -> bool {
        false
    }
}

/// Deserializes a setting: `key: null` is "not set" for plain types, and `None` for `Option`
/// types (whose default is not "off": `top_k: null` turns top-k off).
pub(crate) trait Setting: Sized {
    fn from_yaml<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Self>, D::Error>;
}

macro_rules! plain_settings {
    ($($t:ty),*) => {$(
        impl Setting for $t {
            fn from_yaml<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Self>, D::Error> {
                Option::<$t>::deserialize(d)
            }
        }
    )*};
}
plain_settings!(
    usize,
    u64,
    f64,
    bool,
    String,
    crate::plan::Algorithm,
    crate::plan::JointMode,
    crate::plan::AdvantageMode,
    crate::plan::LrScheduler,
    crate::plan::Dtype
);

impl<T: for<'a> Deserialize<'a>> Setting for Option<T> {
    fn from_yaml<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Self>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

/// serde `deserialize_with` of every table row.
pub(crate) fn setting<'de, D: Deserializer<'de>, T: Setting>(d: D) -> Result<Option<T>, D::Error> {
    T::from_yaml(d)
}

/// A default as a scenario writes it: `20`, `5e-6`, `aligned`, `null`.
pub(crate) fn shown<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(serde_json::Value::Null) => "null".into(),
        Ok(v) => v.to_string(),
        Err(_) => "?".into(),
    }
}

/// Runs one row's check and records its diagnostic.
pub(crate) fn run_check<T>(
    d: &mut Diags,
    section: &KeyPath,
    key: &str,
    value: &T,
    check: impl Fn(&str, &T) -> Option<Bad>,
) {
    if let Some(b) = check(key, value) {
        d.invalid(&section.key(key), b.message, b.hint);
    }
}

/// Joins a row's `///` lines into one paragraph.
pub(crate) fn doc_text(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The markdown key table of a section: key, type, default (and why), meaning.
pub fn markdown_table(keys: &[KeyDoc]) -> String {
    let mut out = String::from("| key | type | default | meaning |\n| --- | --- | --- | --- |\n");
    for k in keys {
        let why = if k.why.is_empty() {
            String::new()
        } else {
            format!(" ({})", k.why)
        };
        out.push_str(&format!(
            "| `{}` | {} | {}{why} | {} |\n",
            k.key, k.kind, k.default, k.doc
        ));
    }
    out
}

/// `{key} must be at least {min}`.
pub(crate) fn at_least(min: usize, hint: &'static str) -> impl Fn(&str, &usize) -> Option<Bad> {
    move |key, v| {
        (*v < min).then(|| Bad {
            message: format!("{key} must be at least {min}"),
            hint: hint.into(),
        })
    }
}

/// A finite number > 0.
pub(crate) fn positive(hint: &'static str) -> impl Fn(&str, &f64) -> Option<Bad> {
    move |key, v| {
        (!(*v > 0.0 && v.is_finite())).then(|| Bad {
            message: format!("{key} must be > 0 (got {v})"),
            hint: hint.into(),
        })
    }
}

/// A finite number ≥ 0.
pub(crate) fn non_negative(hint: &'static str) -> impl Fn(&str, &f64) -> Option<Bad> {
    move |key, v| {
        (!(*v >= 0.0 && v.is_finite())).then(|| Bad {
            message: format!("{key} must be ≥ 0 (got {v})"),
            hint: hint.into(),
        })
    }
}

/// A number in [0, 1] (`closed`) or [0, 1).
pub(crate) fn unit(closed: bool, hint: &'static str) -> impl Fn(&str, &f64) -> Option<Bad> {
    move |key, v| {
        let ok = if closed {
            (0.0..=1.0).contains(v)
        } else {
            (0.0..1.0).contains(v)
        };
        let range = if closed { "[0, 1]" } else { "[0, 1)" };
        (!ok).then(|| Bad {
            message: format!("{key} must be in {range} (got {v})"),
            hint: hint.into(),
        })
    }
}

/// `check` applied to the value of an `Option` setting when it is set.
pub(crate) fn if_set<T>(
    check: impl Fn(&str, &T) -> Option<Bad>,
) -> impl Fn(&str, &Option<T>) -> Option<Bad> {
    move |key, v| v.as_ref().and_then(|x| check(key, x))
}

/// A learning rate: a positive finite number (also `agents.learning_rate`).
pub(crate) fn learning_rate(_key: &str, lr: &f64) -> Option<Bad> {
    (!(*lr > 0.0 && lr.is_finite())).then(|| Bad {
        message: format!("the learning rate must be > 0 (got {lr})"),
        hint: "use a small positive value, e.g. `5e-6` (CoMLRL default) or `5e-5`".into(),
    })
}

/// A row's default for the docs table: its `shown` text, else the default as a scenario writes it.
macro_rules! default_shown {
    ($shown:literal ; $default:expr) => {
        String::from($shown)
    };
    (; $default:expr) => {
        format!("`{}`", $crate::keys::shown(&$default))
    };
}
pub(crate) use default_shown;

/// The raw serde mirror of a key table (shared by `settings_section!` and `agent_section!`): a
/// struct that denies unknown keys, from rows in field order, each one of
/// `setting /// doc key: T,` (an optional setting read by `setting`, so `key: null` works),
/// `plain /// doc key: T,` (the field as it is) or `nested /// doc key: T,` (an optional mapping).
macro_rules! raw_mirror {
    ($(#[doc = $doc:literal])+ $Raw:ident { $($rows:tt)* }) => {
        $crate::keys::raw_mirror!(@rows [$(#[doc = $doc])+ $Raw] [] $($rows)*);
    };
    (@rows $head:tt [$($out:tt)*] setting $(#[doc = $d:literal])+ $k:ident: $t:ty, $($rest:tt)*) => {
        $crate::keys::raw_mirror!(@rows $head [$($out)*
            $(#[doc = $d])+
            #[serde(
                default,
                deserialize_with = "crate::keys::setting",
                skip_serializing_if = "Option::is_none"
            )]
            pub $k: Option<$t>,
        ] $($rest)*);
    };
    (@rows $head:tt [$($out:tt)*] plain $(#[doc = $d:literal])+ $k:ident: $t:ty, $($rest:tt)*) => {
        $crate::keys::raw_mirror!(@rows $head [$($out)* $(#[doc = $d])+ pub $k: $t,] $($rest)*);
    };
    (@rows $head:tt [$($out:tt)*] nested $(#[doc = $d:literal])+ $k:ident: $t:ty, $($rest:tt)*) => {
        $crate::keys::raw_mirror!(@rows $head [$($out)*
            $(#[doc = $d])+
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub $k: Option<$t>,
        ] $($rest)*);
    };
    (@rows [$(#[doc = $doc:literal])+ $Raw:ident] [$($out:tt)*]) => {
        $(#[doc = $doc])+
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $Raw { $($out)* }
    };
}
pub(crate) use raw_mirror;

/// Defines a section's raw mirror, plan struct, resolver, writer and key docs from one table.
macro_rules! settings_section {
    (
        $(#[doc = $raw_doc:literal])+
        raw $Raw:ident;
        $(#[doc = $plan_doc:literal])+
        plan $Plan:ident;
        section $section:literal;
        context $Cx:ty;
        keys {
            $(
                $(#[doc = $doc:literal])+
                $key:ident: $ty:ty = $default:expr,
                    kind $kind:literal,
                    $(shown $shown:literal,)?
                    why $why:literal
                    $(, check $check:expr)?
                    $(, only $only:expr)?
                ;
            )*
        }
        nested {
            $(
                $(#[doc = $ndoc:literal])+
                $nkey:ident: $NRaw:ty => $nty:ty,
                    kind $nkind:literal,
                    shown $nshown:literal,
                    via $via:path,
                    emit $emit:path;
            )*
        }
    ) => {
        $crate::keys::raw_mirror! {
            $(#[doc = $raw_doc])+
            $Raw {
                $( setting $(#[doc = $doc])+ $key: $ty, )*
                $( nested $(#[doc = $ndoc])+ $nkey: $NRaw, )*
            }
        }

        $(#[doc = $plan_doc])+
        #[derive(Debug, Clone, PartialEq)]
        pub struct $Plan {
            $( $(#[doc = $doc])+ pub $key: $ty, )*
            $( $(#[doc = $ndoc])+ pub $nkey: $nty, )*
        }

        impl $Plan {
            /// Every key of the section, in table order, for the docs table.
            pub fn keys() -> Vec<$crate::keys::KeyDoc> {
                vec![
                    $($crate::keys::KeyDoc::row(
                        stringify!($key),
                        $kind,
                        $crate::keys::default_shown!($($shown)? ; $default),
                        $why,
                        &[$($doc),+],
                    ),)*
                    $($crate::keys::KeyDoc::row(
                        stringify!($nkey),
                        $nkind,
                        $nshown.to_string(),
                        "",
                        &[$($ndoc),+],
                    ),)*
                ]
            }

            /// Defaults applied and ranges checked (errors and "no effect" warnings into `d`).
            #[allow(clippy::redundant_closure_call)]
            pub(crate) fn from_raw(d: &mut $crate::collect::Diags, raw: &$Raw, cx: &$Cx) -> $Plan {
                let p = $crate::positions::KeyPath::root().key($section);
                $(
                    let $key: $ty = match raw.$key.clone() {
                        Some(v) => v,
                        None => $default,
                    };
                    $($crate::keys::run_check(d, &p, stringify!($key), &$key, $check);)?
                )*
                let mut plan = $Plan { $($key,)* $($nkey: Default::default(),)* };
                $( plan.$nkey = $via(d, &p.key(stringify!($nkey)), raw.$nkey.as_ref(), &plan, cx); )*
                let _has_eval = $crate::keys::SectionContext::has_eval(cx);
                $($(
                    if raw.$key.is_some() && !$crate::keys::Relevance::holds(&$only, &plan, _has_eval) {
                        if let Some(w) = $crate::keys::Relevance::<$Plan>::moot_warning(&$only) {
                            d.warn(&p.key(stringify!($key)), w);
                        }
                    }
                )?)*
                plan
            }

            /// The plan written back as its section: every key explicit, except those that have
            /// no effect in this run (so that reloading gives no "no effect" warnings).
            pub(crate) fn to_raw(&self, has_eval: bool) -> $Raw {
                let _ = has_eval;
                $Raw {
                    $($key: {
                        let keep = true $(&& $crate::keys::Relevance::holds(&$only, self, has_eval))?;
                        keep.then(|| self.$key.clone())
                    },)*
                    $($nkey: $emit(&self.$nkey),)*
                }
            }
        }
    };
}
pub(crate) use settings_section;
