//! The `section!` macro: every scenario section (the top level, `dataset`, `agents`, `trainer`,
//! `logging`) is one table of keys, and from it are derived the raw serde mirror (which denies
//! unknown keys, so that a typo gets "did you mean"), the plan struct, the defaults and range
//! checks, the resolved-YAML writer and the docs table (`tables.rs` lists the tables;
//! docs/scenario.md shows them).
//!
//! A table is a header, then blocks of rows, each block optional, in this order:
//!
//! ```text
//! raw /// doc
//!     RawX;                      // the raw mirror: what a scenario may write here
//! outer /// doc
//!     RawXGroup;                 // optional: an outer form, with keys of its own (`first`,
//!                                // `last`) beside the shared ones; `shared()` gives the inner
//! written /// doc
//!     RawXOut;                   // optional (the top level): `RawX` keeps each value as JSON,
//!                                // to be read on its own; `RawXOut` is the written form
//! plan /// doc
//!     XPlan, context cx: Ctx;    // optional: the resolved struct and what its defaults and
//!                                // resolvers may name (as `cx`)
//! first { read rows }            // keys of the outer form only, before the shared ones
//! computed { /// doc
//!     index: usize = cx.index; } // plan fields that are no key
//! required { /// doc
//!     model: String => ModelRef, kind "string", via |d, p, spec| ..., emit to_string; }
//! keys { /// doc
//!     steps: usize = 50, kind "integer ≥ 1", [shown "text",] why "reason"
//!         [, check at_least(1, "hint")] [, only Only::Eval]; }
//! group /// field doc
//!     sampling: /// struct doc
//!     Sampling { rows as in `keys`, without `only`: the fields of a nested plan struct }
//! resolved { /// doc
//!     wandb: RawWandb => Option<WandbPlan>, kind "mapping", shown "none", why "",
//!         via |d, p, raw| ..., emit to_raw; }
//! read { /// doc
//!     config: String [= "default".into()], kind "string", [shown "text",] why "" [, check f]; }
//! last { read rows }             // keys of the outer form only, after the shared ones
//! ```
//!
//! Each row's `///` doc is the key's meaning (the docs table's last column), `kind` the accepted
//! values in words, `shown` the docs' default column where the default is no constant (else the
//! default as a scenario writes it), `why` where the default comes from. A `keys` row is a plan
//! field: its default may name `cx` and the keys above it, its `check` (a
//! `fn(key, &value) -> Option<Bad>`) runs on a value the scenario sets, and `only` names the
//! condition under which it matters (a [`Relevance`]: warned about otherwise and left out of
//! the resolved YAML). A `required` or `resolved` row turns its raw value into the plan's with
//! `via` (given the diagnostics, the section's path and the raw value; it may name `cx` and the
//! keys above it) and back with `emit`. A `read` row is read by the section's own code (the
//! dataset's source-dependent rules, the top level's sections); with a default it gets a getter
//! (`raw.config(d, p)`) that applies it and its check. `null` is "not set" except for an
//! `Option` setting, where it is `None` (`top_k: null` turns top-k off). A new value type (an
//! enum) of a `keys` row is listed in `plain_settings!` below.
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
            // A key spelt as a raw identifier in its table (`r#type`) is written without `r#`.
            key: key.trim_start_matches("r#"),
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

/// The condition under which a setting matters (e.g. multi-turn only): a row's `only`.
pub(crate) trait Relevance {
    /// The plan the condition reads.
    type Plan;
    /// Whether the setting has an effect in this plan (`has_eval`: `dataset.eval` is set).
    fn holds(&self, plan: &Self::Plan, has_eval: bool) -> bool;
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
    crate::plan::CriticType,
    crate::plan::JointMode,
    crate::plan::AdvantageMode,
    crate::plan::AdvantageStd,
    crate::plan::AdvantageScale,
    crate::plan::RewardAggregation,
    crate::plan::Preset,
    crate::plan::LossAggregation,
    crate::plan::ImportanceLevel,
    crate::plan::LogprobTemperature,
    crate::plan::LrScheduler,
    crate::plan::PairSelection,
    crate::plan::RlAlgorithm,
    crate::plan::ReplayMode,
    crate::plan::ScoringReward,
    crate::plan::ComparatorGenerationMode,
    crate::plan::ComparatorPolicy,
    crate::plan::CollaborationMode,
    crate::plan::Dtype,
    crate::plan::BaseDtype
);

impl<T: for<'a> Deserialize<'a>> Setting for Option<T> {
    fn from_yaml<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Self>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

/// serde `deserialize_with` of every `keys` and `group` row.
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

/// The docs' default column of a row: its `shown` text, else the default as a scenario writes it.
macro_rules! default_shown {
    ($shown:literal ; $($default:expr)?) => {
        String::from($shown)
    };
    (; $default:expr) => {
        format!("`{}`", $crate::keys::shown(&$default))
    };
}
pub(crate) use default_shown;

/// Gives the resolver closure of a `required` row its signature (so that its parameters need no
/// type annotations in the table).
pub(crate) fn required<R: ?Sized, T, F: FnOnce(&mut Diags, &KeyPath, &R) -> T>(f: F) -> F {
    f
}

/// Gives the resolver closure of a `resolved` row its signature.
pub(crate) fn resolver<R, T, F: FnOnce(&mut Diags, &KeyPath, Option<&R>) -> T>(f: F) -> F {
    f
}

/// Gives the writer of a `required` or `resolved` row its signature.
pub(crate) fn emitter<T, R, F: Fn(&T) -> R>(f: F) -> F {
    f
}

/// Defines a scenario section from its key table (see the module docs for the table's form).
macro_rules! section {
    (
        raw $(#[doc = $raw_doc:literal])+ $Raw:ident;
        $(outer $(#[doc = $outer_doc:literal])+ $Outer:ident;)?
        $(written $(#[doc = $written_doc:literal])+ $Written:ident;)?
        $(plan $(#[doc = $plan_doc:literal])+ $Plan:ident, context $cx:ident: $Cx:ty;)?
        $(first { $(
            $(#[doc = $fdoc:literal])+
            $fkey:ident: $fty:ty $(= $fdefault:expr)?, kind $fkind:literal,
                $(shown $fshown:literal,)? why $fwhy:literal $(, check $fcheck:expr)?;
        )* })?
        $(computed { $(
            $(#[doc = $cdoc:literal])+
            $ckey:ident: $cty:ty = $cexpr:expr;
        )* })?
        $(required { $(
            $(#[doc = $rdoc:literal])+
            $rkey:ident: $RRaw:ty => $rty:ty, kind $rkind:literal, via $rvia:expr,
                emit $remit:expr;
        )* })?
        $(keys { $(
            $(#[doc = $doc:literal])+
            $key:ident: $ty:ty = $default:expr, kind $kind:literal,
                $(shown $shown:literal,)? why $why:literal $(, check $check:expr)?
                $(, only $only:expr)?;
        )* })?
        $(group $(#[doc = $gfdoc:literal])+ $gfield:ident: $(#[$gmeta:meta])* $GPlan:ident { $(
            $(#[doc = $gdoc:literal])+
            $gkey:ident: $gty:ty = $gdefault:expr, kind $gkind:literal,
                $(shown $gshown:literal,)? why $gwhy:literal $(, check $gcheck:expr)?;
        )* })?
        $(resolved { $(
            $(#[doc = $vdoc:literal])+
            $vkey:ident: $VRaw:ty => $vty:ty, kind $vkind:literal, shown $vshown:literal,
                why $vwhy:literal, via $vvia:expr, emit $vemit:expr;
        )* })?
        $(read { $(
            $(#[doc = $edoc:literal])+
            $ekey:ident: $ety:ty $(= $edefault:expr)?, kind $ekind:literal,
                $(shown $eshown:literal,)? why $ewhy:literal $(, check $echeck:expr)?;
        )* })?
        $(last { $(
            $(#[doc = $ldoc:literal])+
            $lkey:ident: $lty:ty $(= $ldefault:expr)?, kind $lkind:literal,
                $(shown $lshown:literal,)? why $lwhy:literal $(, check $lcheck:expr)?;
        )* })?
    ) => {
        $crate::keys::section!(@mirrors
            [$($(#[doc = $written_doc])+ $Written)?] [$($(#[doc = $outer_doc])+ $Outer)?]
            [$(#[doc = $raw_doc])+] $Raw
            first {
                $($(
                    $(#[doc = $fdoc])+
                    #[serde(default, skip_serializing_if = "Option::is_none")]
                    pub $fkey: Option<$fty>,
                )*)?
            }
            shared {
                $($( $(#[doc = $rdoc])+ pub $rkey: $RRaw, )*)?
                $($(
                    $(#[doc = $doc])+
                    #[serde(
                        default,
                        deserialize_with = "crate::keys::setting",
                        skip_serializing_if = "Option::is_none"
                    )]
                    pub $key: Option<$ty>,
                )*)?
                $($(
                    $(#[doc = $gdoc])+
                    #[serde(
                        default,
                        deserialize_with = "crate::keys::setting",
                        skip_serializing_if = "Option::is_none"
                    )]
                    pub $gkey: Option<$gty>,
                )*)?
                $($(
                    $(#[doc = $vdoc])+
                    #[serde(default, skip_serializing_if = "Option::is_none")]
                    pub $vkey: Option<$VRaw>,
                )*)?
                $($(
                    $(#[doc = $edoc])+
                    #[serde(default, skip_serializing_if = "Option::is_none")]
                    pub $ekey: Option<$ety>,
                )*)?
            }
            last {
                $($(
                    $(#[doc = $ldoc])+
                    #[serde(default, skip_serializing_if = "Option::is_none")]
                    pub $lkey: Option<$lty>,
                )*)?
            }
            shared_keys { $($($rkey)*)? $($($key)*)? $($($gkey)*)? $($($vkey)*)? $($($ekey)*)? }
            own_keys { $($($fkey)*)? $($($lkey)*)? }
            getters {
                $($(
                    $crate::keys::section!(@getter typed $ekey: $ety, [$($edefault)?], [$($echeck)?]);
                )*)?
            }
            own_getters {
                $($(
                    $crate::keys::section!(@getter typed $fkey: $fty, [$($fdefault)?], [$($fcheck)?]);
                )*)?
                $($(
                    $crate::keys::section!(@getter typed $lkey: $lty, [$($ldefault)?], [$($lcheck)?]);
                )*)?
            }
            json { $($( $(#[doc = $edoc])+ pub $ekey: Option<serde_json::Value>, )*)? }
            json_getters {
                $($(
                    $crate::keys::section!(@getter json $ekey: $ety, [$($edefault)?], [$($echeck)?]);
                )*)?
            }
            written { $($( $(#[doc = $edoc])+ pub $ekey: $ety, )*)? }
        );

        $crate::keys::section!(@docs [$($Plan)?] [$($Outer)?] $Raw {
            $($(
                $crate::keys::KeyDoc::row(
                    stringify!($fkey),
                    $fkind,
                    $crate::keys::default_shown!($($fshown)? ; $($fdefault)?),
                    $fwhy,
                    &[$($fdoc),+],
                ),
            )*)?
            $($(
                $crate::keys::KeyDoc::row(
                    stringify!($rkey),
                    $rkind,
                    String::from("required"),
                    "",
                    &[$($rdoc),+],
                ),
            )*)?
            $($(
                $crate::keys::KeyDoc::row(
                    stringify!($key),
                    $kind,
                    $crate::keys::default_shown!($($shown)? ; $default),
                    $why,
                    &[$($doc),+],
                ),
            )*)?
            $($(
                $crate::keys::KeyDoc::row(
                    stringify!($gkey),
                    $gkind,
                    $crate::keys::default_shown!($($gshown)? ; $gdefault),
                    $gwhy,
                    &[$($gdoc),+],
                ),
            )*)?
            $($(
                $crate::keys::KeyDoc::row(
                    stringify!($vkey),
                    $vkind,
                    String::from($vshown),
                    $vwhy,
                    &[$($vdoc),+],
                ),
            )*)?
            $($(
                $crate::keys::KeyDoc::row(
                    stringify!($ekey),
                    $ekind,
                    $crate::keys::default_shown!($($eshown)? ; $($edefault)?),
                    $ewhy,
                    &[$($edoc),+],
                ),
            )*)?
            $($(
                $crate::keys::KeyDoc::row(
                    stringify!($lkey),
                    $lkind,
                    $crate::keys::default_shown!($($lshown)? ; $($ldefault)?),
                    $lwhy,
                    &[$($ldoc),+],
                ),
            )*)?
        });

        $(
            $(#[$gmeta])*
            #[derive(Debug, Clone, PartialEq)]
            pub struct $GPlan {
                $( $(#[doc = $gdoc])+ pub $gkey: $gty, )*
            }
        )?

        // The plan's code names its locals through these identifiers: the `@plan` arm binds
        // them (macro hygiene keeps apart identifiers written in different expansions).
        $crate::keys::section!(@plan
            [$($(#[doc = $plan_doc])+ $Plan, $cx: $Cx)?] $Raw [d p raw plan this has_eval]
            fields {
                $($( $(#[doc = $cdoc])+ pub $ckey: $cty, )*)?
                $($( $(#[doc = $rdoc])+ pub $rkey: $rty, )*)?
                $($( $(#[doc = $doc])+ pub $key: $ty, )*)?
                $( $(#[doc = $gfdoc])+ pub $gfield: $GPlan, )?
                $($( $(#[doc = $vdoc])+ pub $vkey: $vty, )*)?
            }
            resolve {
                $($( let $ckey: $cty = $cexpr; )*)?
                $($(
                    let $rkey: $rty =
                        $crate::keys::required::<$RRaw, $rty, _>($rvia)(d, p, &raw.$rkey);
                )*)?
                $($(
                    let $key: $ty = $crate::keys::section!(
                        @value d, p, raw.$key.clone(), $key, $default $(, $check)?
                    );
                )*)?
                $($(
                    let $gkey: $gty = $crate::keys::section!(
                        @value d, p, raw.$gkey.clone(), $gkey, $gdefault $(, $gcheck)?
                    );
                )*)?
                $($(
                    let $vkey: $vty =
                        $crate::keys::resolver::<$VRaw, $vty, _>($vvia)(d, p, raw.$vkey.as_ref());
                )*)?
            }
            build {
                $($( $ckey, )*)?
                $($( $rkey, )*)?
                $($( $key, )*)?
                $( $gfield: $GPlan { $( $gkey, )* }, )?
                $($( $vkey, )*)?
            }
            moot {
                $($($(
                    if raw.$key.is_some() && !$crate::keys::Relevance::holds(&$only, &plan, has_eval) {
                        if let Some(w) = $crate::keys::Relevance::moot_warning(&$only) {
                            d.warn(&p.key(stringify!($key)), w);
                        }
                    }
                )?)*)?
            }
            emit {
                $($(
                    $rkey: $crate::keys::emitter::<$rty, $RRaw, _>($remit)(&this.$rkey),
                )*)?
                $($(
                    $key: {
                        let keep = true
                            $(&& $crate::keys::Relevance::holds(&$only, this, has_eval))?;
                        keep.then(|| this.$key.clone())
                    },
                )*)?
                $($( $gkey: Some(this.$gfield.$gkey.clone()), )*)?
                $($(
                    $vkey: $crate::keys::emitter::<$vty, Option<$VRaw>, _>($vemit)(&this.$vkey),
                )*)?
                $($( $ekey: None, )*)?
            }
            plan_fields {
                $($( (stringify!($rkey), stringify!($rkey)), )*)?
                $($( (stringify!($key), stringify!($key)), )*)?
                $($(
                    (stringify!($gkey), concat!(stringify!($gfield), ".", stringify!($gkey))),
                )*)?
                $($( (stringify!($vkey), stringify!($vkey)), )*)?
            }
        );
    };

    // The raw mirror (typed: it is also the written form) and its outer form if any; or, with
    // `written`, JSON per key for reading and a typed struct for writing.
    (@mirrors [] [$($outer:tt)*] [$(#[$m:meta])+] $Raw:ident
        first { $($first:tt)* } shared { $($shared:tt)* } last { $($last:tt)* }
        shared_keys { $($shared_keys:ident)* } own_keys { $($own_keys:ident)* }
        getters { $($getters:tt)* } own_getters { $($own_getters:tt)* }
        json { $($json:tt)* } json_getters { $($json_getters:tt)* } written { $($written:tt)* }
    ) => {
        $(#[$m])+
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $Raw { $($shared)* }

        impl $Raw { $($getters)* }

        $crate::keys::section!(@outer [$($outer)*] $Raw
            fields { $($first)* $($shared)* $($last)* }
            shared_keys { $($shared_keys)* } own_keys { $($own_keys)* }
            own_getters { $($own_getters)* }
        );
    };
    (@mirrors [$(#[$wm:meta])+ $Written:ident] [] [$(#[$m:meta])+] $Raw:ident
        first { $($first:tt)* } shared { $($shared:tt)* } last { $($last:tt)* }
        shared_keys { $($shared_keys:ident)* } own_keys { $($own_keys:ident)* }
        getters { $($getters:tt)* } own_getters { $($own_getters:tt)* }
        json { $($json:tt)* } json_getters { $($json_getters:tt)* } written { $($written:tt)* }
    ) => {
        $(#[$m])+
        #[derive(Debug, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $Raw { $($json)* }

        impl $Raw { $($json_getters)* }

        $(#[$wm])+
        #[derive(Debug, serde::Serialize)]
        pub struct $Written { $($written)* }
    };
    (@outer [] $($rest:tt)*) => {};
    (@outer [$(#[$m:meta])+ $Outer:ident] $Raw:ident
        fields { $($fields:tt)* }
        shared_keys { $($shared:ident)* } own_keys { $($own:ident)* }
        own_getters { $($getters:tt)* }
    ) => {
        $(#[$m])+
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $Outer { $($fields)* }

        impl $Outer {
            /// The keys it shares with the inner form.
            pub fn shared(&self) -> $Raw {
                $Raw { $($shared: self.$shared.clone(),)* }
            }

            /// The outer form of `raw`, its own keys unset.
            pub fn from_shared(raw: $Raw) -> $Outer {
                $Outer { $($shared: raw.$shared,)* $($own: None,)* }
            }

            $($getters)*
        }
    };

    // The docs table, on the plan, else the outer form, else the raw mirror.
    (@docs [$Plan:ident] [$($Outer:ident)?] $Raw:ident { $($rows:tt)* }) => {
        $crate::keys::section!(@docs_on $Plan { $($rows)* });
    };
    (@docs [] [$Outer:ident] $Raw:ident { $($rows:tt)* }) => {
        $crate::keys::section!(@docs_on $Outer { $($rows)* });
    };
    (@docs [] [] $Raw:ident { $($rows:tt)* }) => {
        $crate::keys::section!(@docs_on $Raw { $($rows)* });
    };
    (@docs_on $Type:ident { $($rows:tt)* }) => {
        impl $Type {
            /// Every key of the section, in table order, for the docs table.
            pub fn keys() -> Vec<$crate::keys::KeyDoc> {
                vec![$($rows)*]
            }
        }
    };

    // A `read` row with a default: a getter that applies it (and the row's check).
    (@getter $mode:ident $key:ident: $ty:ty, [], [$($check:expr)?]) => {};
    (@getter typed $key:ident: $ty:ty, [$default:expr], [$($check:expr)?]) => {
        #[doc = concat!("`", stringify!($key), "`, its default applied; a value out of range is reported under `p`.")]
        pub(crate) fn $key(
            &self,
            d: &mut $crate::collect::Diags,
            p: &$crate::positions::KeyPath,
        ) -> $ty {
            let _ = (&d, p);
            $crate::keys::section!(@value d, p, self.$key.clone(), $key, $default $(, $check)?)
        }
    };
    (@getter json $key:ident: $ty:ty, [$default:expr], [$($check:expr)?]) => {
        #[doc = concat!("`", stringify!($key), "` read from its JSON, its default applied; errors are reported under `p`.")]
        pub(crate) fn $key(
            &self,
            d: &mut $crate::collect::Diags,
            p: &$crate::positions::KeyPath,
        ) -> $ty {
            let set = self
                .$key
                .clone()
                .and_then(|v| $crate::deser::section::<$ty>(d, &p.key(stringify!($key)), v));
            $crate::keys::section!(@value d, p, set, $key, $default $(, $check)?)
        }
    };

    // A setting's value: the scenario's, checked (a diagnostic under `$p`), else the default.
    (@value $d:ident, $p:ident, $set:expr, $key:ident, $default:expr $(, $check:expr)?) => {
        match $set {
            Some(v) => {
                $($crate::keys::run_check($d, $p, stringify!($key), &v, $check);)?
                v
            }
            None => $default,
        }
    };

    // The plan struct, its resolver (defaults, checks, moot warnings) and its writer.
    (@plan [] $($rest:tt)*) => {};
    (@plan [$(#[$m:meta])+ $Plan:ident, $cx:ident: $Cx:ty] $Raw:ident
        [$d:ident $p:ident $raw:ident $plan:ident $this:ident $has_eval:ident]
        fields { $($fields:tt)* } resolve { $($resolve:tt)* } build { $($build:tt)* }
        moot { $($moot:tt)* } emit { $($emit:tt)* } plan_fields { $($plan_fields:tt)* }
    ) => {
        $(#[$m])+
        #[derive(Debug, Clone, PartialEq)]
        pub struct $Plan { $($fields)* }

        impl $Plan {
            /// Each key (the outer form's own left out: the loader reads them) with the plan
            /// field that holds it (`temperature` → `sampling.temperature`).
            pub fn plan_fields() -> Vec<(&'static str, &'static str)> {
                vec![$($plan_fields)*]
            }

            /// The section's plan: defaults applied, the values the scenario sets checked,
            /// diagnostics and "no effect" warnings under `p` (the section's path: `trainer`,
            /// `agents` for the shared form, `agents[i]` for an entry of the list).
            #[allow(clippy::redundant_closure_call)]
            pub(crate) fn from_raw(
                $d: &mut $crate::collect::Diags,
                $p: &$crate::positions::KeyPath,
                $raw: &$Raw,
                $cx: &$Cx,
            ) -> $Plan {
                $($resolve)*
                let $plan = $Plan { $($build)* };
                let $has_eval = $crate::keys::SectionContext::has_eval($cx);
                $($moot)*
                let _ = ($has_eval, $raw);
                $plan
            }

            /// The plan written back as its section: every key explicit, except those that
            /// have no effect in this run (so that reloading gives no "no effect" warnings).
            pub(crate) fn to_raw(&self, $has_eval: bool) -> $Raw {
                let $this = self;
                let _ = $has_eval;
                $Raw { $($emit)* }
            }
        }
    };
}
pub(crate) use section;
