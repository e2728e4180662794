//! Where a model comes from: `builtin:<preset>`, a local directory in HF layout, or a Hugging Face
//! hub id found in the HF cache (snapshot layout) or downloaded when online.
use crate::model::decoder::config::ModelConfig;
use crate::model::error::{Error, Result};
use std::path::{Path, PathBuf};

/// A parsed model reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// `builtin:<preset>`: seeded random weights and the built-in byte tokenizer; no files.
    Builtin(String),
    /// A directory with config.json, *.safetensors, tokenizer.json.
    Local(PathBuf),
    /// `owner/name` (optionally `owner/name@revision`) on the Hugging Face hub.
    Hub {
        /// `owner/name`.
        repo: String,
        /// Branch, tag or commit (`main` unless given).
        revision: String,
    },
    /// A llama.cpp GGUF file (`*.gguf`): config, tokenizer and weights from the one file.
    Gguf(PathBuf),
}

impl ModelSource {
    /// Parses `spec`; relative directories resolve against `base_dir`.
    pub fn parse(spec: &str, base_dir: &Path) -> Result<Self> {
        let err = |msg: String| Error::Resolve {
            model: spec.to_string(),
            msg,
        };
        if let Some(name) = spec.strip_prefix("builtin:") {
            if ModelConfig::preset(name).is_none() {
                return Err(err(format!(
                    "unknown built-in model `{name}`; available: {}",
                    ModelConfig::PRESETS
                        .iter()
                        .map(|p| format!("builtin:{p}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            return Ok(ModelSource::Builtin(name.to_string()));
        }
        let looks_like_path = spec.starts_with('/')
            || spec.starts_with("./")
            || spec.starts_with("../")
            || spec.starts_with('~')
            || spec == "."
            || spec == "..";
        let local = base_dir.join(spec);
        if super::gguf::is_gguf_path(&local) {
            if local.is_file() {
                return Ok(ModelSource::Gguf(local));
            }
            return Err(err(format!("GGUF file {} does not exist", local.display())));
        }
        if local.is_dir() {
            return Ok(ModelSource::Local(local));
        }
        if looks_like_path {
            return Err(err(format!("directory {} does not exist", local.display())));
        }
        let (repo, revision) = match spec.split_once('@') {
            Some((r, rev)) => (r, rev.to_string()),
            None => (spec, "main".to_string()),
        };
        let hub = comlrl_scenario::hub::repo_id_problem(repo)
            .or_else(|| comlrl_scenario::hub::revision_problem(&revision));
        match hub {
            None => Ok(ModelSource::Hub {
                repo: repo.to_string(),
                revision,
            }),
            Some(why) => Err(err(format!(
                "not a local directory ({} does not exist), not a hub id of the form `owner/name` \
                 ({why}), and not `builtin:<name>`",
                local.display()
            ))),
        }
    }

    /// A local path: a `*.gguf` file becomes [`ModelSource::Gguf`], anything else `Local`.
    pub fn local(path: PathBuf) -> Self {
        if super::gguf::is_gguf_path(&path) && !path.is_dir() {
            ModelSource::Gguf(path)
        } else {
            ModelSource::Local(path)
        }
    }

    /// The directory holding the model's files (downloading hub files when needed).
    /// `None` for built-in models and GGUF files (which have no HF directory).
    pub fn resolve_dir(&self) -> Result<Option<PathBuf>> {
        match self {
            ModelSource::Builtin(_) | ModelSource::Gguf(_) => Ok(None),
            ModelSource::Local(dir) => Ok(Some(dir.clone())),
            ModelSource::Hub { repo, revision } => hub_dir(repo, revision).map(Some),
        }
    }

    /// The files of this model as far as they are on this machine, without downloading: a local
    /// directory, or a Hub model's snapshot in the Hub cache holding its `tokenizer_config.json`
    /// or `chat_template.jinja`. `None` for built-in models, GGUF files (their template is in the
    /// file's metadata, read when the model is loaded) and uncached Hub models.
    pub fn cached_dir(&self) -> Result<Option<PathBuf>> {
        Ok(match self {
            ModelSource::Builtin(_) | ModelSource::Gguf(_) => None,
            ModelSource::Local(dir) => Some(dir.clone()),
            ModelSource::Hub { repo, revision } => {
                let (_, cached) = cache_repo(repo, revision)?;
                ["tokenizer_config.json", "chat_template.jinja"]
                    .iter()
                    .find_map(|f| cached.get(f))
                    .and_then(|p| p.parent().map(Path::to_path_buf))
            }
        })
    }

    /// As a user would write it: `builtin:<name>`, the path, or `owner/name[@revision]`.
    pub fn describe(&self) -> String {
        match self {
            ModelSource::Builtin(n) => format!("builtin:{n}"),
            ModelSource::Local(d) | ModelSource::Gguf(d) => d.display().to_string(),
            ModelSource::Hub { repo, revision } if revision == "main" => repo.clone(),
            ModelSource::Hub { repo, revision } => format!("{repo}@{revision}"),
        }
    }
}

/// The hub cache root: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn hub_cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("HF_HOME").filter(|p| !p.is_empty()) {
        return PathBuf::from(p).join("hub");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache").join("huggingface").join("hub")
}

pub(crate) fn offline() -> bool {
    ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"].iter().any(|k| {
        std::env::var(k)
            .map(|v| matches!(v.as_str(), "1" | "true" | "TRUE" | "yes" | "ON" | "on"))
            .unwrap_or(false)
    })
}

/// Files a hub model must provide, then optional ones.
const REQUIRED: &[&str] = &["config.json", "tokenizer.json"];
const OPTIONAL: &[&str] = &[
    "generation_config.json",
    "tokenizer_config.json",
    "chat_template.jinja",
];

/// The Hub cache's copy of `repo` at `revision`, its ref checked first: hf-hub joins the ref's
/// text to the snapshots folder unchecked, so a tampered ref would point outside the cache (or
/// name a device that reads without end).
fn cache_repo(repo: &str, revision: &str) -> Result<(hf_hub::Repo, hf_hub::CacheRepo)> {
    let cache_root = hub_cache_dir();
    let hrepo = hf_hub::Repo::with_revision(
        repo.to_string(),
        hf_hub::RepoType::Model,
        revision.to_string(),
    );
    let ref_file = cache_root
        .join(hrepo.folder_name())
        .join("refs")
        .join(revision);
    comlrl_scenario::hub::read_ref(&ref_file).map_err(|msg| Error::Resolve {
        model: repo.to_string(),
        msg,
    })?;
    let cached = hf_hub::Cache::new(cache_root).repo(hrepo.clone());
    Ok((hrepo, cached))
}

fn hub_dir(repo: &str, revision: &str) -> Result<PathBuf> {
    let cache_root = hub_cache_dir();
    let (hrepo, cached) = cache_repo(repo, revision)?;
    let weights_cached = cached
        .get("model.safetensors")
        .or_else(|| cached.get("model.safetensors.index.json"));
    if let (Some(w), true) = (
        &weights_cached,
        REQUIRED.iter().all(|f| cached.get(f).is_some()),
    ) {
        let dir = w.parent().map(Path::to_path_buf).unwrap_or_default();
        if super::safetensors::checkpoint_files(&dir)?
            .iter()
            .all(|f| f.is_file())
        {
            return Ok(dir);
        }
    }
    let tried = cache_root.join(hrepo.folder_name());
    if offline() {
        return Err(Error::Resolve {
            model: repo.to_string(),
            msg: format!(
                "not in the Hugging Face cache (looked in {}; set HF_HOME or HF_HUB_CACHE to another cache) \
                 and HF_HUB_OFFLINE is set, so it was not downloaded",
                tried.display()
            ),
        });
    }
    download(repo, revision, &cache_root).map_err(|e| Error::Resolve {
        model: repo.to_string(),
        msg: format!(
            "not in the Hugging Face cache (looked in {}; set HF_HOME or HF_HUB_CACHE to another cache) \
             and downloading failed: {e}. Download it where you have network (e.g. `huggingface-cli download {repo}`) \
             or pass a local directory",
            tried.display()
        ),
    })
}

fn download(repo: &str, revision: &str, cache_root: &Path) -> std::result::Result<PathBuf, String> {
    let api =
        hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(cache_root.to_path_buf()))
            .with_progress(true)
            .build()
            .map_err(|e| e.to_string())?;
    let r = api.repo(hf_hub::Repo::with_revision(
        repo.to_string(),
        hf_hub::RepoType::Model,
        revision.to_string(),
    ));
    let mut dir = None;
    for f in REQUIRED {
        let p = r.get(f).map_err(|e| format!("{f}: {e}"))?;
        dir = p.parent().map(Path::to_path_buf);
    }
    for f in OPTIONAL {
        let _ = r.get(f); // absent optional files are fine
    }
    match r.get("model.safetensors") {
        Ok(_) => {}
        Err(_) => {
            let idx = r
                .get("model.safetensors.index.json")
                .map_err(|e| format!("model.safetensors / model.safetensors.index.json: {e}"))?;
            let text = std::fs::read_to_string(&idx).map_err(|e| e.to_string())?;
            let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            let mut shards: Vec<String> = json
                .get("weight_map")
                .and_then(|m| m.as_object())
                .map(|m| {
                    m.values()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            shards.sort();
            shards.dedup();
            for s in shards {
                r.get(&s).map_err(|e| format!("{s}: {e}"))?;
            }
        }
    }
    dir.ok_or_else(|| "no files".to_string())
}
