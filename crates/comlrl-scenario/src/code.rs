//! Code a scenario points at (reward terms, the external transition): exactly one of `rhai:` /
//! `plugin:`, resolved against the scenario directory, and checked to exist.
use crate::collect::Diags;
use crate::error::ErrorKind;
use crate::paths;
use crate::plan::CodeSource;
use crate::positions::KeyPath;
use crate::LoadOptions;
use std::path::Path;

/// Resolves the `rhai` / `plugin` pair found at `path`. Errors are reported at the offending key.
pub(crate) fn resolve_code(
    d: &mut Diags,
    path: &KeyPath,
    rhai: Option<&Path>,
    plugin: Option<&Path>,
    base: &Path,
    opts: &LoadOptions,
) -> Option<CodeSource> {
    match (rhai, plugin) {
        (Some(_), Some(_)) => {
            d.invalid(
                &path.key("plugin"),
                "both `rhai` and `plugin` are set",
                "keep exactly one: a Rhai script (`rhai: file.rhai`) or a native plugin (`plugin: path`)",
            );
            None
        }
        (None, None) => {
            d.error(
                ErrorKind::MissingKey,
                path,
                "neither `rhai` nor `plugin` is set",
                Some("add `rhai: path/to/script.rhai` or `plugin: path/to/plugin`".into()),
            );
            None
        }
        (Some(script), None) => {
            let abs = paths::resolve(base, script);
            if opts.require_reward_files && !abs.is_file() {
                d.error(
                    ErrorKind::MissingFile,
                    &path.key("rhai"),
                    paths::not_a_file("Rhai script", &abs),
                    Some(format!(
                        "paths are relative to the scenario file's directory ({})",
                        base.display()
                    )),
                );
            }
            Some(CodeSource::Rhai(abs))
        }
        (None, Some(lib)) => {
            let abs = paths::resolve(base, lib);
            // Same lookup as the plugin loader: a bare name maps to `lib<name>.so` etc.
            let candidates = comlrl_plugin_api::library_files::candidates(&abs);
            if opts.require_reward_files && !candidates.iter().any(|c| c.is_file()) {
                let looked = candidates
                    .iter()
                    .map(|c| c.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                d.error(
                    ErrorKind::MissingFile,
                    &path.key("plugin"),
                    format!("native plugin not found (looked for {looked})"),
                    Some(
                        "build the plugins first: run `cargo build --release --workspace` in the \
                         comlrl checkout (with CARGO_TARGET_DIR set, the library is under that \
                         folder instead of target/)"
                            .into(),
                    ),
                );
            }
            Some(CodeSource::Plugin(abs))
        }
    }
}
