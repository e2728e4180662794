//! The `agent_section!` macro: the `agents` key table (`agent_keys.rs`), from which the raw
//! mirrors of both shapes (`agents: {count, ...}` and the list of per-agent mappings), the
//! resolved plan struct with its nested `Sampling`, defaults with their reasons, range checks
//! (reported under `agents.key` or `agents[i].key`), the resolved-YAML writer and the docs table
//! are derived. It is a sibling of `settings_section!` (`keys.rs`) for a section that is repeated
//! per agent. The table has these blocks, in this order:
//!
//! ```text
//! context cx: AgentContext<'_>;   // what defaults and resolvers may name (as `cx`)
//! shape {    // keys of the shared form only (`count`): a getter applies default and check
//!     /// doc
//!     count: usize = 2, kind "integer ≥ 1", why "CoMLRL", check at_least(1, "hint");
//! }
//! computed { /// doc
//!     index: usize = cx.index; }      // plan fields that are no scenario key
//! required { /// doc
//!     model: String => ModelRef, kind "...", via |d, p, spec| ..., emit |m| ...; }
//! keys {     // plain settings, as in `settings_section!`
//!     /// doc
//!     dtype: Dtype = Dtype::Auto, kind "...", [shown "...",] why "..." [, check f];
//! }
//! group /// field doc
//!     sampling: /// struct doc
//!     Sampling { rows as in `keys`: fields of the nested plan struct }
//! resolved { /// doc
//!     template: String => Template, kind "...", shown "...", why "...",
//!         via |d, p, raw: Option<&String>| ..., emit |t| Some(...); }
//! ```
//!
//! Defaults and resolvers may name `cx` and every key above them (`chat_template`'s resolver
//! reads `model` and `system_prompt`). `p` in a resolver is the agent's path (`agents` or
//! `agents[i]`). A check runs on a value the scenario sets (defaults are valid, or, like the
//! learning rate taken from `trainer`, checked where they are set).
use crate::collect::Diags;
use crate::positions::KeyPath;

/// Gives a resolver closure of a `required` row its signature (so that its parameters need no
/// type annotations in the table).
pub(crate) fn required<R: ?Sized, T, F: FnOnce(&mut Diags, &KeyPath, &R) -> T>(f: F) -> F {
    f
}

/// Gives a resolver closure of a `resolved` row its signature.
pub(crate) fn resolver<R, T, F: FnOnce(&mut Diags, &KeyPath, Option<&R>) -> T>(f: F) -> F {
    f
}

/// Gives the writer closure of a row its signature.
pub(crate) fn emitter<T, R, F: Fn(&T) -> R>(f: F) -> F {
    f
}

/// Defines the per-agent raw mirrors, plan structs, resolver, writer and key docs from one table.
macro_rules! agent_section {
    (
        $(#[doc = $raw_doc:literal])+
        raw $Raw:ident;
        $(#[doc = $group_doc:literal])+
        group $Group:ident;
        $(#[doc = $plan_doc:literal])+
        plan $Plan:ident;
        context $cx:ident: $Cx:ty;
        shape {
            $(
                $(#[doc = $gdoc:literal])+
                $gkey:ident: $gty:ty = $gdefault:expr, kind $gkind:literal, why $gwhy:literal
                    $(, check $gcheck:expr)?;
            )*
        }
        computed {
            $( $(#[doc = $cdoc:literal])+ $ckey:ident: $cty:ty = $cexpr:expr; )*
        }
        required {
            $(
                $(#[doc = $rdoc:literal])+
                $rkey:ident: $RRaw:ty => $rty:ty, kind $rkind:literal,
                    via $rvia:expr, emit $remit:expr;
            )*
        }
        keys {
            $(
                $(#[doc = $doc:literal])+
                $key:ident: $ty:ty = $default:expr,
                    kind $kind:literal,
                    $(shown $shown:literal,)?
                    why $why:literal
                    $(, check $check:expr)?
                ;
            )*
        }
        group $(#[doc = $sfdoc:literal])+ $sfield:ident: $(#[$smeta:meta])* $SPlan:ident {
            $(
                $(#[doc = $sdoc:literal])+
                $skey:ident: $sty:ty = $sdefault:expr,
                    kind $skind:literal,
                    $(shown $sshown:literal,)?
                    why $swhy:literal
                    $(, check $scheck:expr)?
                ;
            )*
        }
        resolved {
            $(
                $(#[doc = $vdoc:literal])+
                $vkey:ident: $VRaw:ty => $vty:ty, kind $vkind:literal, shown $vshown:literal,
                    why $vwhy:literal, via $vvia:expr, emit $vemit:expr;
            )*
        }
    ) => {
        $crate::keys::raw_mirror! {
            $(#[doc = $raw_doc])+
            $Raw {
                $( plain $(#[doc = $rdoc])+ $rkey: $RRaw, )*
                $( setting $(#[doc = $doc])+ $key: $ty, )*
                $( setting $(#[doc = $sdoc])+ $skey: $sty, )*
                $( nested $(#[doc = $vdoc])+ $vkey: $VRaw, )*
            }
        }

        $crate::keys::raw_mirror! {
            $(#[doc = $group_doc])+
            $Group {
                $( setting $(#[doc = $gdoc])+ $gkey: $gty, )*
                $( plain $(#[doc = $rdoc])+ $rkey: $RRaw, )*
                $( setting $(#[doc = $doc])+ $key: $ty, )*
                $( setting $(#[doc = $sdoc])+ $skey: $sty, )*
                $( nested $(#[doc = $vdoc])+ $vkey: $VRaw, )*
            }
        }

        impl $Group {
            /// The settings shared by every agent of the group.
            pub fn agent(&self) -> $Raw {
                $Raw {
                    $($rkey: self.$rkey.clone(),)*
                    $($key: self.$key.clone(),)*
                    $($skey: self.$skey.clone(),)*
                    $($vkey: self.$vkey.clone(),)*
                }
            }

            $(
                $(#[doc = $gdoc])+
                /// (Default applied; an out-of-range value is reported under `path`.)
                pub(crate) fn $gkey(&self, d: &mut $crate::collect::Diags, path: &$crate::positions::KeyPath) -> $gty {
                    $crate::agent_macro::agent_section!(
                        @value d, path, self.$gkey.clone(), $gkey, $gdefault $(, $gcheck)?
                    )
                }
            )*
        }

        $(#[doc = $plan_doc])+
        #[derive(Debug, Clone, PartialEq)]
        pub struct $Plan {
            $( $(#[doc = $cdoc])+ pub $ckey: $cty, )*
            $( $(#[doc = $rdoc])+ pub $rkey: $rty, )*
            $( $(#[doc = $doc])+ pub $key: $ty, )*
            $(#[doc = $sfdoc])+
            pub $sfield: $SPlan,
            $( $(#[doc = $vdoc])+ pub $vkey: $vty, )*
        }

        $(#[$smeta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $SPlan {
            $( $(#[doc = $sdoc])+ pub $skey: $sty, )*
        }

        impl $Plan {
            /// Every key of the section, in table order, for the docs table.
            pub fn keys() -> Vec<$crate::keys::KeyDoc> {
                vec![
                    $($crate::keys::KeyDoc::row(
                        stringify!($gkey),
                        $gkind,
                        format!("`{}`", $crate::keys::shown(&$gdefault)),
                        $gwhy,
                        &[$($gdoc),+],
                    ),)*
                    $($crate::keys::KeyDoc::row(
                        stringify!($rkey),
                        $rkind,
                        "required".to_string(),
                        "",
                        &[$($rdoc),+],
                    ),)*
                    $($crate::keys::KeyDoc::row(
                        stringify!($key),
                        $kind,
                        $crate::keys::default_shown!($($shown)? ; $default),
                        $why,
                        &[$($doc),+],
                    ),)*
                    $($crate::keys::KeyDoc::row(
                        stringify!($skey),
                        $skind,
                        $crate::keys::default_shown!($($sshown)? ; $sdefault),
                        $swhy,
                        &[$($sdoc),+],
                    ),)*
                    $($crate::keys::KeyDoc::row(
                        stringify!($vkey),
                        $vkind,
                        $vshown.to_string(),
                        $vwhy,
                        &[$($vdoc),+],
                    ),)*
                ]
            }

            /// Each per-agent key (shape keys left out: the loader reads them) with the plan
            /// field that holds it (`temperature` → `sampling.temperature`).
            pub fn plan_fields() -> Vec<(&'static str, &'static str)> {
                vec![
                    $((stringify!($rkey), stringify!($rkey)),)*
                    $((stringify!($key), stringify!($key)),)*
                    $((stringify!($skey), concat!(stringify!($sfield), ".", stringify!($skey))),)*
                    $((stringify!($vkey), stringify!($vkey)),)*
                ]
            }

            /// One agent, defaults applied and ranges checked; diagnostics under `p` (`agents`
            /// for the shared form, `agents[i]` for the list form).
            pub(crate) fn from_raw(
                d: &mut $crate::collect::Diags,
                p: &$crate::positions::KeyPath,
                raw: &$Raw,
                $cx: &$Cx,
            ) -> $Plan {
                $( let $ckey: $cty = $cexpr; )*
                $(
                    let $rkey: $rty = $crate::agent_macro::required::<$RRaw, $rty, _>($rvia)(d, p, &raw.$rkey);
                )*
                $(
                    let $key: $ty = $crate::agent_macro::agent_section!(
                        @value d, p, raw.$key.clone(), $key, $default $(, $check)?
                    );
                )*
                $(
                    let $skey: $sty = $crate::agent_macro::agent_section!(
                        @value d, p, raw.$skey.clone(), $skey, $sdefault $(, $scheck)?
                    );
                )*
                $(
                    let $vkey: $vty = $crate::agent_macro::resolver::<$VRaw, $vty, _>($vvia)(d, p, raw.$vkey.as_ref());
                )*
                let _ = $cx;
                $Plan {
                    $($ckey,)*
                    $($rkey,)*
                    $($key,)*
                    $sfield: $SPlan { $($skey,)* },
                    $($vkey,)*
                }
            }

            /// The agent written back as one entry of the `agents` list, every key explicit.
            pub(crate) fn to_raw(&self) -> $Raw {
                $Raw {
                    $($rkey: $crate::agent_macro::emitter::<$rty, $RRaw, _>($remit)(&self.$rkey),)*
                    $($key: Some(self.$key.clone()),)*
                    $($skey: Some(self.$sfield.$skey.clone()),)*
                    $($vkey: $crate::agent_macro::emitter::<$vty, Option<$VRaw>, _>($vemit)(&self.$vkey),)*
                }
            }
        }
    };
    // A setting's value: the scenario's, range-checked (diagnostic under `$p`), else the default.
    (@value $d:ident, $p:expr, $set:expr, $key:ident, $default:expr $(, $check:expr)?) => {
        match $set {
            Some(v) => {
                $($crate::keys::run_check($d, $p, stringify!($key), &v, $check);)?
                v
            }
            None => $default,
        }
    };
}
pub(crate) use agent_section;
