//! `comlrl export --gguf`: write a model (a run's `models/agent_i`, any HF directory, hub id or
//! GGUF) as a llama.cpp GGUF file for llama.cpp / ollama.
use super::inputs::ModelArgs;
use anyhow::{bail, Context};
use comlrl::model::io::gguf::Quant;
use comlrl::model::ModelSource;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Write a GGUF file (the only export format).
    #[arg(long)]
    pub gguf: bool,
    /// Storage of the weight matrices: f16, q8_0 or f32 (norms and biases stay f32).
    #[arg(long, default_value = "f16")]
    pub quant: String,
    /// The file to write (`*.gguf`). An existing file is replaced only with --force, and
    /// never when it is one of the model's own files.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace `--out` when it exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !a.gguf {
        bail!("pass --gguf: GGUF is the only export format (a run's models/agent_i is already an HF directory)");
    }
    let quant = Quant::parse(&a.quant).context("--quant")?;
    let policy = a.model.load()?;
    check_out(&a.out, &policy.source, a.force)?;
    let context = || {
        format!(
            "exporting {} to {}",
            policy.source.describe(),
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
        policy.vars().iter().filter(|(_, v)| v.rank() == 2).count(),
        a.quant
    );
    Ok(())
}

/// Refuses an `out` that is one of the model's own files (its directory's files, or the GGUF
/// it was read from), and an existing file unless `force`.
fn check_out(out: &Path, source: &ModelSource, force: bool) -> anyhow::Result<()> {
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
    let inputs: Vec<PathBuf> = match source {
        ModelSource::Gguf(file) => vec![file.clone()],
        other => match other.resolve_dir()? {
            Some(dir) => std::fs::read_dir(&dir)
                .with_context(|| format!("reading {}", dir.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect(),
            None => vec![],
        },
    };
    if inputs
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .any(|p| p == target)
    {
        bail!(
            "--out {} is a file of the model being exported ({}); write the GGUF elsewhere",
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
