//! `comlrl export`: write a model (a run's `models/agent_i`, any HF directory, hub id or GGUF)
//! as a llama.cpp GGUF file for llama.cpp / ollama (`--gguf`), or a base with a LoRA adapter
//! (`--adapter`, a PEFT directory such as a run's `models/agent_i` with `agents.adapter`) merged
//! into one model: an HF directory (`--merge`) or a GGUF (`--gguf --adapter`).
use super::inputs::ModelArgs;
use anyhow::{bail, Context};
use comlrl::model::io::gguf::Quant;
use comlrl::model::io::peft::Adapter;
use comlrl::model::{ModelSource, Policy};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Write a GGUF file (with `--adapter`: of the merged model).
    #[arg(long, conflicts_with = "merge")]
    pub gguf: bool,
    /// Write the base with `--adapter` merged into it (W + scale·B·A) as an HF model directory
    /// (config, tokenizer files, model.safetensors in `--dtype`).
    #[arg(long, requires = "adapter")]
    pub merge: bool,
    /// A PEFT LoRA adapter directory (`adapter_config.json`, `adapter_model.safetensors`, as a
    /// run with `agents.adapter` writes to `models/agent_i`) to merge into `--model`.
    #[arg(long)]
    pub adapter: Option<PathBuf>,
    /// Storage of the GGUF's weight matrices: f16 (default), q8_0 or f32 (norms and biases stay
    /// f32). GGUF only.
    #[arg(long)]
    pub quant: Option<String>,
    /// The file (`--gguf`) or directory (`--merge`) to write. An existing one is replaced only
    /// with --force, and never when it is (or holds) one of the inputs.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace `--out` when it exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !a.gguf && !a.merge {
        bail!(
            "pass --gguf (a GGUF file) or --merge with --adapter DIR (an HF directory of the \
             merged model); a run's models/agent_i without adapters is already an HF directory"
        );
    }
    if a.merge {
        if a.quant.is_some() {
            bail!("--quant applies to --gguf only: --merge writes the weights in --dtype");
        }
        return merge(&a);
    }
    let quant_name = a.quant.as_deref().unwrap_or("f16");
    let quant = Quant::parse(quant_name).context("--quant")?;
    let policy = load(&a)?;
    check_out(&a.out, &policy.source, a.adapter.as_deref(), a.force)?;
    let context = || {
        format!(
            "exporting {} to {}",
            describe(&policy, a.adapter.as_deref()),
            a.out.display()
        )
    };
    // Written beside the target and renamed over it: a failed export leaves what was there.
    let dir = match a.out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".comlrl-export-")
        .tempfile_in(&dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    policy
        .export_gguf(quant, tmp.path())
        .with_context(context)?;
    // A temporary file is private (0600); the export is a model file like the saved ones.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644))
        .with_context(context)?;
    tmp.persist(&a.out)
        .map_err(|e| e.error)
        .with_context(context)?;
    let size = std::fs::metadata(&a.out).map(|m| m.len()).unwrap_or(0);
    println!(
        "wrote {} ({:.1} MB, {} matrices as {})",
        a.out.display(),
        size as f64 / 1e6,
        policy
            .base_vars()
            .iter()
            .filter(|(_, v)| v.rank() == 2)
            .count(),
        quant_name
    );
    Ok(())
}

/// The model, with `--adapter` on it when given (checked against the base: targets, rank and
/// every tensor's shape; the adapter read in f32 whatever `--dtype`, so the merge rounds once).
fn load(a: &Args) -> anyhow::Result<Policy> {
    let policy = a.model.load()?;
    let Some(dir) = &a.adapter else {
        return Ok(policy);
    };
    let dev = policy.model.device().clone();
    let adapter = Adapter::load(dir, &policy.config, candle_core::DType::F32, &dev)
        .with_context(|| format!("--adapter {}", dir.display()))?;
    policy
        .with_adapter(adapter)
        .with_context(|| format!("--adapter {}", dir.display()))
}

fn describe(policy: &Policy, adapter: Option<&Path>) -> String {
    match adapter {
        Some(d) => format!(
            "{} with the adapter {}",
            policy.source.describe(),
            d.display()
        ),
        None => policy.source.describe(),
    }
}

/// `--merge`: the merged model as an HF directory, written beside `--out` and renamed into
/// place (`Policy::save`), so a failed export leaves what was there.
fn merge(a: &Args) -> anyhow::Result<()> {
    let policy = load(a)?;
    let adapter = policy
        .adapter()
        .context("--merge needs --adapter DIR (the LoRA adapter to merge)")?;
    check_out_dir(&a.out, &policy.source, a.adapter.as_deref(), a.force)?;
    let context = || {
        format!(
            "merging {} into {}",
            describe(&policy, a.adapter.as_deref()),
            a.out.display()
        )
    };
    let merged = policy.merge(adapter).with_context(context)?;
    merged.save(&a.out).with_context(context)?;
    let spec = &adapter.spec;
    println!(
        "wrote {} ({} projections per layer merged at rank {}, scale {})",
        a.out.display(),
        spec.targets.len(),
        spec.rank,
        spec.scale()
    );
    Ok(())
}

/// The directories an export reads: the model's own (none for built-in models; for a GGUF, the
/// file itself) and the adapter's.
fn input_paths(source: &ModelSource, adapter: Option<&Path>) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = match source {
        ModelSource::Gguf(file) => vec![file.clone()],
        other => other.resolve_dir()?.into_iter().collect(),
    };
    out.extend(adapter.map(Path::to_path_buf));
    Ok(out
        .into_iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect())
}

/// Refuses an `out` directory that is one of the inputs or holds one (replacing it would
/// delete the model or adapter being merged), a file, and an existing directory unless `force`.
fn check_out_dir(
    out: &Path,
    source: &ModelSource,
    adapter: Option<&Path>,
    force: bool,
) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::metadata(out) else {
        if std::fs::symlink_metadata(out).is_ok() {
            bail!(
                "--out {}: is a dangling symbolic link; remove it or choose another path",
                out.display()
            );
        }
        return Ok(());
    };
    let target = out
        .canonicalize()
        .with_context(|| format!("--out {}", out.display()))?;
    if let Some(p) = input_paths(source, adapter)?
        .iter()
        .find(|p| p.starts_with(&target))
    {
        bail!(
            "--out {} is or holds an input of the merge ({}); write the merged model elsewhere",
            out.display(),
            p.display()
        );
    }
    if !meta.is_dir() {
        bail!(
            "--out {}: exists and is not a directory; --merge writes a model directory",
            out.display()
        );
    }
    if !force {
        bail!(
            "--out {} exists; pass --force to replace it, or choose another path",
            out.display()
        );
    }
    Ok(())
}

/// Refuses an `out` that is one of the inputs' files (the model directory's files, the GGUF it
/// was read from, the adapter directory's files), and an existing file unless `force`.
fn check_out(
    out: &Path,
    source: &ModelSource,
    adapter: Option<&Path>,
    force: bool,
) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::metadata(out) else {
        if std::fs::symlink_metadata(out).is_ok() {
            bail!(
                "--out {}: is a dangling symbolic link; remove it or choose another path",
                out.display()
            );
        }
        return Ok(());
    };
    let target = out
        .canonicalize()
        .with_context(|| format!("--out {}", out.display()))?;
    let mut inputs = vec![];
    for p in input_paths(source, adapter)? {
        match p.is_dir() {
            true => inputs.extend(
                std::fs::read_dir(&p)
                    .with_context(|| format!("reading {}", p.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path())),
            ),
            false => inputs.push(p),
        }
    }
    if inputs
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .any(|p| p == target)
    {
        bail!(
            "--out {} is a file of the model being exported or of its adapter ({}); write \
             the GGUF elsewhere",
            out.display(),
            source.describe()
        );
    }
    if !meta.is_file() {
        bail!(
            "--out {}: is not a regular file; choose a file path",
            out.display()
        );
    }
    if !force {
        bail!(
            "--out {} exists; pass --force to replace it, or choose another path",
            out.display()
        );
    }
    Ok(())
}
