//! Downloading `dataset.hub` datasets with `hf-hub` into the Hub cache, in the layout
//! `huggingface_hub` uses, for `comlrl run`: the files of one config and split, from the
//! repository's `main` branch or else from the Hub's parquet conversion (`refs/convert/parquet`).
use comlrl_scenario::hub::{is_split_file, REVISIONS};
use comlrl_scenario::{HubDownload, HubRequest};
use std::path::Path;
use std::sync::Arc;

/// The download hook for [`comlrl_scenario::LoadOptions::hub_download`].
pub fn downloader() -> HubDownload {
    Arc::new(|req: &HubRequest, root: &Path| download(req, root))
}

fn download(req: &HubRequest, root: &Path) -> Result<(), String> {
    if crate::model::io::source::offline() {
        return Err("HF_HUB_OFFLINE is set".into());
    }
    let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(root.to_path_buf()))
        .with_progress(true)
        .build()
        .map_err(|e| e.to_string())?;
    let mut tried = Vec::new();
    for rev in REVISIONS {
        let repo = api.repo(hf_hub::Repo::with_revision(
            req.repo.clone(),
            hf_hub::RepoType::Dataset,
            rev.to_string(),
        ));
        let info = match repo.info() {
            Ok(i) => i,
            Err(e) => {
                tried.push(format!("{rev}: {e}"));
                continue;
            }
        };
        let files: Vec<&str> = info
            .siblings
            .iter()
            .map(|s| s.rfilename.as_str())
            .filter(|f| is_split_file(f, &req.config, &req.split))
            .collect();
        if files.is_empty() {
            tried.push(format!(
                "{rev}: no parquet file of config `{}`, split `{}`",
                req.config, req.split
            ));
            continue;
        }
        for f in files {
            repo.get(f).map_err(|e| format!("{rev}: {f}: {e}"))?;
        }
        return Ok(());
    }
    Err(tried.join("; "))
}
