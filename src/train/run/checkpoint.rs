//! Checkpoints: weights, AdamW moments, progress, RNG state, buffered rollouts and the resolved
//! scenario, written to a temporary directory with a `manifest.json` of hashes and renamed into
//! place (then `latest` is swapped atomically), so an interrupted or failed run always leaves its
//! last checkpoint intact; loading verifies the manifest and the state before using anything.
//!
//! In a distributed run every rank writes its own agents' files and its own state
//! (`state.json` on rank 0, `state.rank<r>.json` on rank r) into the same directory (the output
//! directory must be on a filesystem every rank sees); rank 0 writes the manifest last, once
//! every rank's part is there, so a checkpoint is complete only with all of them.
use super::manifest;
use super::state::TrainState;
use super::verify::{check_state, Expect};
use crate::dist::World;
use crate::error::{Error, Result};
use crate::model::io::safetensors::save_tensors;
use crate::model::Policy;
use crate::train::optim::adamw::AdamW;
use crate::train::optim::moment_io::{self, dtype_name, MomentView};
use crate::train::optim::moments::{Moments, StateDtype};
use candle_core::{Device, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a checkpoint holds beside the agents' weights, AdamW moments and the training state:
/// an algorithm's own networks (critics, value heads) with their optimizers, and its own
/// state. Written by every rank for the agents it writes, verified by the manifest like the
/// rest, restored after the agents.
pub trait CheckpointPart {
    /// The files written for agent `i` (each must be there on resume).
    fn files(&self, _agent: usize) -> Vec<String> {
        vec![]
    }

    /// Writes this rank's files into the checkpoint directory `dir` (for the agents `writes`
    /// selects).
    fn save(&self, _dir: &Path, _writes: &[bool]) -> Result<()> {
        Ok(())
    }

    /// Restores them from the verified checkpoint in `dir` (for the agents `held` selects).
    fn load(&mut self, _dir: &Path, _held: &[bool]) -> Result<()> {
        Ok(())
    }

    /// Writes its networks beside the final models, into the `models` directory being
    /// written (for the agents `writes` selects).
    fn save_models(&self, _models: &Path, _writes: &[bool]) -> Result<()> {
        Ok(())
    }
}

/// The state file of `rank` in a checkpoint directory.
pub fn state_file(rank: usize) -> String {
    match rank {
        0 => "state.json".into(),
        r => format!("state.rank{r}.json"),
    }
}

/// What a checkpoint file over its size limit is.
const DAMAGED: &str = "it is not a file comlrl wrote, or it is damaged";

/// The most `checkpoints/latest` may hold: a `step-N` name.
const LATEST_CAP: u64 = 64;

/// `<output_dir>/checkpoints`.
pub fn checkpoints_dir(output_dir: &Path) -> PathBuf {
    output_dir.join("checkpoints")
}

/// Writes a checkpoint and makes it the latest; of the older ones only the previous latest is
/// kept (by recency, not by step number: a step number says nothing about which run wrote it).
///
/// A collective in a distributed run: every rank calls it at the same step with the agents it
/// holds (`None` for the others); it writes those with `writes[i]` (an agent's first replica).
pub fn save(
    output_dir: &Path,
    state: &TrainState,
    held: &Held,
    scenario_yaml: &str,
    world: &dyn World,
) -> Result<PathBuf> {
    let root = checkpoints_dir(output_dir);
    let name = format!("step-{:08}", state.step);
    // The run id in the name: pruning removes only this run's leftovers.
    let tmp = root.join(format!("{}{name}", tmp_prefix(&state.run_id)));
    if world.is_root() {
        std::fs::create_dir_all(&root).map_err(|e| Error::io(&root, e))?;
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
        write(&tmp.join("scenario.yaml"), scenario_yaml)?;
    }
    // The other ranks write into the directory rank 0 has just made.
    world.barrier();
    let written = write_parts(&tmp, state, held, world.rank())
        .and_then(|()| held.extra.save(&tmp, held.writes));
    if let Err(e) = written {
        // A checkpoint without its manifest is never used, but its bytes are what a full disk
        // needs back (for the final models, see `Trainer::after_failed_checkpoint`).
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    // Every rank's part is written before rank 0 hashes the directory.
    world.barrier();
    if !world.is_root() {
        return Ok(root.join(&name));
    }
    // Written last: a checkpoint without its manifest is never used.
    manifest::write(&tmp, &state.run_id, state.step)?;
    let previous = latest_name(&root);
    let dir = root.join(&name);
    if std::fs::symlink_metadata(&dir).is_ok() {
        // The same step written again (a resumed run stopped at once): replace it, but only
        // when it is this run's.
        if !is_this_runs(&dir, &state.run_id) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Error::checkpoint(
                &dir,
                "exists and is not a checkpoint of this run; comlrl does not replace it: move it \
                 away or choose another `output_dir`",
            ));
        }
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    }
    std::fs::rename(&tmp, &dir).map_err(|e| Error::io(&dir, e))?;
    let latest_tmp = root.join(".latest.tmp");
    write(&latest_tmp, &name)?;
    std::fs::rename(&latest_tmp, root.join("latest"))
        .map_err(|e| Error::io(root.join("latest"), e))?;
    // Prune: keep the new checkpoint and the one it replaces as `latest`; of the rest, remove
    // only what this run wrote (its manifest names this run, or its own temporary name).
    let keep: Vec<String> = std::iter::once(name).chain(previous).collect();
    let leftover = tmp_prefix(&state.run_id);
    for entry in std::fs::read_dir(&root).map_err(|e| Error::io(&root, e))? {
        let Ok(entry) = entry else { continue };
        let n = entry.file_name().to_string_lossy().into_owned();
        let stale =
            (valid_name(&n) && !keep.contains(&n) && is_this_runs(&entry.path(), &state.run_id))
                || n.starts_with(&leftover);
        let real_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if stale && real_dir {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Ok(dir)
}

/// What a checkpoint saves of this rank: its agents with their optimizers (`None` where
/// another rank holds one), which of them it writes, and the algorithm's part.
pub struct Held<'a> {
    /// Each agent's policy.
    pub policies: &'a [Option<Policy>],
    /// Each agent's optimizer.
    pub optims: &'a [Option<AdamW>],
    /// `writes[i]`: this rank writes agent `i`'s files (its first replica).
    pub writes: &'a [bool],
    /// What the algorithm adds.
    pub extra: &'a dyn CheckpointPart,
}

/// This rank's part of a checkpoint in `tmp`: its training state, and the weights and AdamW
/// moments of the agents it writes.
fn write_parts(tmp: &Path, state: &TrainState, held: &Held, rank: usize) -> Result<()> {
    let Held {
        policies,
        optims,
        writes,
        ..
    } = *held;
    let state_json =
        serde_json::to_string(state).map_err(|e| Error::serialize("the training state", e))?;
    write(&tmp.join(state_file(rank)), &state_json)?;
    let held = policies
        .iter()
        .zip(optims)
        .enumerate()
        .filter(|(i, _)| writes.get(*i).copied().unwrap_or(false));
    for (i, (p, opt)) in held.filter_map(|(i, (p, o))| Some((i, (p.as_ref()?, o.as_ref()?)))) {
        write_weights(&p.vars(), &tmp.join(format!("agent_{i}.safetensors")))?;
        write_moments(opt, &tmp.join(format!("optimizer_{i}.safetensors")))?;
    }
    Ok(())
}

/// Writes the tensors `vars` names into the safetensors file `path` (a checkpoint's weights;
/// also an algorithm's networks).
pub fn write_weights(vars: &[(String, candle_core::Var)], path: &Path) -> Result<()> {
    let weights: BTreeMap<String, Tensor> = vars
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().detach()))
        .collect();
    save_tensors(&weights, path)?;
    Ok(())
}

/// Writes `opt`'s AdamW moments into the safetensors file `path` (`m.<name>`, `v.<name>`).
pub fn write_moments(opt: &AdamW, path: &Path) -> Result<()> {
    // The moments are written from the optimizer's own buffers (locked meanwhile): a copy
    // would be two more sets of weights at the run's peak.
    let guards: Vec<_> = opt
        .params
        .iter()
        .map(|ps| Ok((ps, lock(&ps.m)?, lock(&ps.v)?)))
        .collect::<Result<_>>()?;
    let mut moments = Vec::with_capacity(2 * guards.len());
    for (ps, m, v) in &guards {
        let shape = ps.var.as_tensor().dims().to_vec();
        moments.push((format!("m.{}", ps.name), MomentView::new(m, shape.clone())));
        moments.push((format!("v.{}", ps.name), MomentView::new(v, shape)));
    }
    safetensors::serialize_to_file(moments, None, path)
        .map_err(|e| Error::checkpoint_by(path, "cannot write safetensors", e))
}

/// The name prefix of this run's temporary checkpoint directories.
fn tmp_prefix(run_id: &str) -> String {
    format!(".tmp-{run_id}-")
}

/// `dir` is a plain directory (not a link) whose manifest names run `run_id`.
fn is_this_runs(dir: &Path, run_id: &str) -> bool {
    let plain = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
    plain && manifest::run_id_of(dir).is_some_and(|id| id == run_id)
}

/// The name `latest` holds when it is a valid checkpoint name (a `step-N` child).
fn latest_name(root: &Path) -> Option<String> {
    let name = comlrl_scenario::files::read_text(&root.join("latest"), LATEST_CAP, DAMAGED).ok()?;
    let name = name.trim();
    valid_name(name).then(|| name.to_string())
}

/// `step-` followed by digits only: a plain child of the checkpoints directory.
fn valid_name(name: &str) -> bool {
    name.strip_prefix("step-")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

fn lock(m: &std::sync::Mutex<Moments>) -> Result<std::sync::MutexGuard<'_, Moments>> {
    m.lock()
        .map_err(|_| Error::Internal("optimizer state lock poisoned".into()))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// The latest checkpoint directory, if any.
pub fn latest(output_dir: &Path) -> Result<Option<PathBuf>> {
    let root = checkpoints_dir(output_dir);
    let ptr = root.join("latest");
    if std::fs::symlink_metadata(&ptr).is_err() {
        return Ok(None);
    }
    let name = comlrl_scenario::files::read_text(&ptr, LATEST_CAP, DAMAGED)
        .map_err(|e| Error::checkpoint_by(&ptr, "cannot be read", e))?;
    let name = name.trim();
    if !valid_name(name) {
        return Err(Error::checkpoint(
            &ptr,
            format!("holds `{name}`, not a checkpoint name of this run (`step-N`); refusing to follow it"),
        ));
    }
    let dir = root.join(name);
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(Some(dir)),
        Ok(m) if m.file_type().is_symlink() => Err(Error::checkpoint(
            &ptr,
            format!(
                "points to {}, which is a symbolic link; comlrl writes checkpoints as plain \
                 directories and does not follow links there",
                dir.display()
            ),
        )),
        Ok(_) => Err(Error::checkpoint(
            &ptr,
            format!(
                "points to {}, which is not a directory (a checkpoint is one)",
                dir.display()
            ),
        )),
        Err(_) => Err(Error::checkpoint(
            &ptr,
            format!("points to {}, which is missing", dir.display()),
        )),
    }
}

/// Verifies the checkpoint in `dir` (manifest hashes, run id, state against `expect`), then
/// restores weights and optimizer moments in place and returns the saved state and scenario,
/// plus a note for each agent whose moments were stored in the other `optimizer_state_dtype`
/// (they are converted: bf16 → f32 exactly, f32 → bf16 rounded to nearest).
///
/// `rank` reads its own state file and restores the agents it holds (`Some` in `policies`),
/// then the algorithm's part (`extra`).
pub fn load(
    dir: &Path,
    policies: &[Option<Policy>],
    optims: &mut [Option<AdamW>],
    extra: &mut dyn CheckpointPart,
    expect: &Expect,
    run_id: &str,
    rank: usize,
) -> Result<(TrainState, String, Vec<String>)> {
    let sfile = state_file(rank);
    let mut notes = Vec::new();
    let mpath = dir.join(manifest::MANIFEST);
    let mut required = vec![sfile.clone(), "scenario.yaml".to_string()];
    for i in (0..policies.len()).filter(|&i| policies[i].is_some()) {
        required.push(format!("agent_{i}.safetensors"));
        required.push(format!("optimizer_{i}.safetensors"));
        required.extend(extra.files(i));
    }
    let m = manifest::verify(dir, &required).map_err(|e| match rank {
        0 => e,
        r => Error::checkpoint(
            &mpath,
            format!("{e}; rank {r} has no part in this checkpoint: was it written by fewer ranks? resume with the same `mpirun -np` as the run that wrote it"),
        ),
    })?;
    if m.run_id != run_id {
        return Err(Error::checkpoint(
            &mpath,
            format!(
                "field `run_id` is `{}`, but this output_dir's run.json names run `{run_id}`: \
                 the checkpoint belongs to another run; start over with --overwrite",
                m.run_id
            ),
        ));
    }
    // Both files were just verified against the manifest: their recorded sizes bound the reads.
    let recorded = |name: &str| m.files.get(name).map_or(0, |f| f.bytes);
    let state_path = dir.join(&sfile);
    let text = comlrl_scenario::files::read_text(&state_path, recorded(&sfile), DAMAGED)
        .map_err(|e| Error::io(&state_path, e))?;
    let state: TrainState = serde_json::from_str(&text)
        .map_err(|e| Error::checkpoint_by(&state_path, "unreadable checkpoint state", e))?;
    if state.run_id != m.run_id || state.step != m.step {
        return Err(Error::checkpoint(
            &state_path,
            format!(
                "fields `run_id`/`step` ({}, {}) differ from manifest.json ({}, {})",
                state.run_id, state.step, m.run_id, m.step
            ),
        ));
    }
    check_state(&state, expect, &state_path)?;
    if state.ranks != expect.ranks {
        let show = |r: &[usize]| match r.is_empty() {
            true => "all on one process".to_string(),
            false => format!("on ranks {r:?}"),
        };
        return Err(Error::checkpoint(
            &state_path,
            format!(
                "field `ranks`: the checkpoint's agents were {}, this run places them {}; \
                 resume with the same `mpirun -np` and `agents.rank` as the run that wrote it",
                show(&state.ranks),
                show(&expect.ranks)
            ),
        ));
    }
    // Adapter weights of the same shape load under another scaling or onto a base held in
    // another dtype without complaint, and the run would go on from different numbers.
    if !state.trained.is_empty() {
        let pairs = state.trained.iter().zip(&expect.trained).enumerate();
        if let Some((i, (was, now))) = pairs.clone().find(|(_, (was, now))| was != now) {
            return Err(Error::checkpoint(
                &state_path,
                format!(
                    "field `trained[{i}]`: agent {i} trained {was}, this scenario trains {now}; \
                     resume with `agents.adapter`, `agents.base_dtype` and `trainer.critic`'s \
                     `adapter` and `base_dtype` as the run had them \
                     (scenario.yaml beside the checkpoint), or start a new run with --overwrite"
                ),
            ));
        }
        if state.trained.len() != expect.trained.len() {
            return Err(Error::checkpoint(
                &state_path,
                format!(
                    "field `trained` has {} entries for {} agents",
                    state.trained.len(),
                    expect.trained.len()
                ),
            ));
        }
    }
    let scen_path = dir.join("scenario.yaml");
    let scenario =
        comlrl_scenario::files::read_text(&scen_path, recorded("scenario.yaml"), DAMAGED)
            .map_err(|e| Error::io(&scen_path, e))?;
    let held = policies.iter().zip(optims.iter_mut()).enumerate();
    for (i, (p, opt)) in held.filter_map(|(i, (p, o))| Some((i, (p.as_ref()?, o.as_mut()?)))) {
        read_weights(&p.vars(), &dir.join(format!("agent_{i}.safetensors")))?;
        p.weights_changed()?;
        let opath = dir.join(format!("optimizer_{i}.safetensors"));
        if let Some(was) = read_moments(opt, &opath)? {
            notes.push(format!(
                "note: {} holds AdamW moments in {}, trainer.optimizer_state_dtype is {}: converted \
                 them ({}), so the resumed run does not continue the original bit for bit; \
                 resume with `--set trainer.optimizer_state_dtype={}` to keep them as written",
                opath.display(),
                dtype_name(was),
                dtype_name(opt.state_dtype),
                match was {
                    StateDtype::Bf16 => "bf16 to f32 is exact",
                    StateDtype::F32 => "f32 to bf16, rounded to nearest",
                },
                dtype_name(was)
            ));
        }
        opt.step = state.opt_steps[i];
    }
    let held: Vec<bool> = policies.iter().map(Option::is_some).collect();
    extra.load(dir, &held)?;
    Ok((state, scenario, notes))
}

/// Sets each of `vars` to its tensor in the safetensors file `path` (a verified checkpoint's).
pub fn read_weights(vars: &[(String, candle_core::Var)], path: &Path) -> Result<()> {
    let weights = candle_core::safetensors::load(path, &Device::Cpu)
        .map_err(|e| Error::checkpoint_by(path, "unreadable checkpoint weights", e))?;
    for (name, var) in vars {
        let t = weights.get(name).ok_or_else(|| {
            Error::checkpoint(
                path,
                format!("tensor `{name}` missing: the checkpoint is from another model"),
            )
        })?;
        if t.dims() != var.as_tensor().dims() {
            return Err(Error::checkpoint(
                path,
                format!("tensor `{name}` has another shape: the checkpoint is from another model"),
            ));
        }
        var.set(&t.to_dtype(var.dtype())?)?;
    }
    Ok(())
}

/// Restores `opt`'s AdamW moments from the safetensors file `path`, converted to its state
/// dtype; returns the stored dtype when it was the other one.
pub fn read_moments(opt: &mut AdamW, path: &Path) -> Result<Option<StateDtype>> {
    let moments = candle_core::safetensors::load(path, &Device::Cpu)
        .map_err(|e| Error::checkpoint_by(path, "unreadable optimizer state", e))?;
    let mut converted = None;
    for ps in &opt.params {
        for (key, slot) in [("m", &ps.m), ("v", &ps.v)] {
            let t = moments
                .get(&format!("{key}.{}", ps.name))
                .ok_or_else(|| Error::checkpoint(path, format!("`{key}.{}` missing", ps.name)))?;
            let want = ps.var.as_tensor().dims();
            let stored = match t.dims() == want {
                true => moment_io::read(t)?,
                false => None,
            };
            let Some(stored) = stored else {
                return Err(Error::checkpoint(
                    path,
                    format!(
                        "`{key}.{}` is {:?} {:?}, the parameter is {want:?} (moments are F32 or BF16)",
                        ps.name,
                        t.dtype(),
                        t.dims()
                    ),
                ));
            };
            if stored.dtype() != opt.state_dtype {
                converted = Some(stored.dtype());
            }
            *lock(slot)? = stored.converted(opt.state_dtype);
        }
    }
    Ok(converted)
}
