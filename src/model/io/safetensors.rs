//! Checkpoint tensors in safetensors files: loading the tensors a config implies
//! (`decoder::tensors`) from one file or several shards (any float dtype, converted to the
//! training dtype) with errors that name the tensor and file, and writing them back.
use super::shard::Shard;
use crate::model::decoder::config::ModelConfig;
use crate::model::decoder::tensors::{self, expected_tensors};
use crate::model::error::{Error, Result};
use crate::model::kernels::q8_weight;
use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The safetensors files of a model directory: `model.safetensors`, or the shards listed by
/// `model.safetensors.index.json`.
pub fn checkpoint_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| Error::io(&index, e))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::file(&index, format!("not valid JSON: {e}")))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| Error::file(&index, "has no `weight_map` object"))?;
        let mut files: Vec<PathBuf> = map
            .values()
            .filter_map(|v| v.as_str())
            .map(|f| dir.join(f))
            .collect();
        files.sort();
        files.dedup();
        return Ok(files);
    }
    Err(Error::file(
        dir,
        "no model.safetensors or model.safetensors.index.json (only safetensors checkpoints are supported; \
         convert .bin/.pth weights with transformers' save_pretrained)",
    ))
}

/// Loads every expected tensor from `files` as a variable of `dtype` (read straight into the
/// buffer the model keeps: see `shard`), after checking every name, shape and dtype.
/// Rotary `inv_freq` buffers and a tied model's `lm_head.weight` are ignored; any other tensor
/// the config does not use (e.g. a layer beyond `num_hidden_layers`) is an error.
pub fn load_tensors(
    cfg: &ModelConfig,
    files: &[PathBuf],
    dtype: DType,
    base_dtype: Option<DType>,
    dev: &Device,
) -> Result<HashMap<String, Tensor>> {
    let mut shards = Vec::with_capacity(files.len());
    let mut found: HashMap<String, (usize, Vec<usize>, safetensors::Dtype)> = HashMap::new();
    for file in files {
        if !file.is_file() {
            return Err(Error::file(file, "checkpoint shard listed but missing"));
        }
        let shard = Shard::open(file)?;
        for (name, info) in shard.tensors() {
            found.insert(name, (shards.len(), info.shape.clone(), info.dtype));
        }
        shards.push(shard);
    }
    let where_ = files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    // The layer count first: it sizes the list of expected names below.
    let held: std::collections::BTreeSet<usize> = found
        .keys()
        .filter_map(|n| {
            n.strip_prefix("model.layers.")?
                .split_once('.')?
                .0
                .parse()
                .ok()
        })
        .collect();
    if cfg.num_hidden_layers > held.len() {
        return Err(Error::file(
            files.first().cloned().unwrap_or_default(),
            format!(
                "config.json says num_hidden_layers = {} but the checkpoint holds tensors of {} \
                 layer(s) (looked in {where_}); the checkpoint does not match its config.json",
                cfg.num_hidden_layers,
                held.len()
            ),
        ));
    }
    // Every name, shape and dtype is checked before any tensor is read.
    let mut wanted = Vec::new();
    for (name, shape, _) in expected_tensors(cfg)? {
        let (i, got, dt) = found.remove(&name).ok_or_else(|| {
            Error::file(
                files.first().cloned().unwrap_or_default(),
                format!("tensor `{name}` is missing (looked in {where_}); the checkpoint does not match its config.json"),
            )
        })?;
        let file = shards[i].path();
        if got != shape {
            return Err(Error::file(
                file,
                format!("tensor `{name}` has shape {got:?} but config.json implies {shape:?}"),
            ));
        }
        if !super::shard::loadable(dt) {
            return Err(super::shard::unsupported(file, &name, dt));
        }
        wanted.push((name, i));
    }
    let mut unused: Vec<String> = found
        .into_keys()
        .filter(|n| {
            !(n.ends_with(".rotary_emb.inv_freq")
                || (cfg.tie_word_embeddings && n == "lm_head.weight"))
        })
        .collect();
    if !unused.is_empty() {
        unused.sort();
        let n = unused.len();
        let shown = unused
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Error::file(
            files.first().cloned().unwrap_or_default(),
            format!(
                "{n} tensor(s) that config.json does not use ({shown}{}); the checkpoint does not \
                 match its config.json (num_hidden_layers {}, tie_word_embeddings {})",
                if n > 5 { ", …" } else { "" },
                cfg.num_hidden_layers,
                cfg.tie_word_embeddings
            ),
        ));
    }
    let mut out = HashMap::with_capacity(wanted.len());
    for (name, i) in wanted {
        let held = crate::model::decoder::tensors::held_dtype(&name, dtype, base_dtype);
        // Q8_0 blocks are quantized from the tensor read in the model's dtype (one matrix).
        let t = match held == q8_weight::HELD {
            true => tensors::hold(&shards[i].read_var(&name, dtype, dev)?, held)?,
            false => shards[i].read_var(&name, held, dev)?,
        };
        out.insert(name, t);
    }
    Ok(out)
}

/// Writes tensors to one safetensors file (names sorted; metadata `format: pt` as transformers
/// expects). f32 CPU tensors are written from their storage without a copy (candle's own view
/// copies each tensor first: a transient as large as the largest tensor).
pub fn save_tensors(tensors: &BTreeMap<String, Tensor>, path: &Path) -> Result<()> {
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    let tensors: Vec<(&String, Tensor)> = tensors
        .iter()
        .map(|(k, t)| Ok((k, t.contiguous()?)))
        .collect::<Result<_>>()?;
    let guards: Vec<_> = tensors
        .iter()
        .map(|(_, t)| t.storage_and_layout())
        .collect();
    let views: Vec<(&str, SaveView)> = tensors
        .iter()
        .zip(&guards)
        .map(|((k, t), (st, l))| {
            let borrowed = match (&**st, l.contiguous_offsets()) {
                (Storage::Cpu(CpuStorage::F32(v)), Some((a, b)))
                    if cfg!(target_endian = "little") =>
                {
                    Some(bytemuck::cast_slice::<f32, u8>(&v[a..b]))
                }
                _ => None,
            };
            (
                k.as_str(),
                SaveView {
                    tensor: t,
                    borrowed,
                },
            )
        })
        .collect();
    safetensors::serialize_to_file(views.iter().map(|(k, v)| (*k, v)), Some(meta), path)
        .map_err(|e| Error::file(path, format!("cannot write safetensors: {e}")))?;
    // safetensors creates the file private (0600); weights are as readable as the other files.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| Error::io(path, e))
}

/// A tensor for `safetensors::serialize_to_file`: its f32 storage borrowed where it is one,
/// else candle's copying view.
struct SaveView<'a> {
    tensor: &'a Tensor,
    borrowed: Option<&'a [u8]>,
}

impl safetensors::View for &SaveView<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        safetensors::View::dtype(self.tensor)
    }

    fn shape(&self) -> &[usize] {
        self.tensor.dims()
    }

    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        match self.borrowed {
            Some(b) => std::borrow::Cow::Borrowed(b),
            None => safetensors::View::data(self.tensor),
        }
    }

    fn data_len(&self) -> usize {
        safetensors::View::data_len(self.tensor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Borrowed f32 storage (a narrowed view included) writes the bytes candle's copying view
    /// writes; other dtypes go through candle's view.
    #[test]
    fn saved_file_is_the_copying_writers() -> Result<()> {
        let dev = Device::Cpu;
        let big = Tensor::arange(0f32, 60.0, &dev)?.reshape((6, 10))?;
        let mut tensors = BTreeMap::new();
        tensors.insert("a.weight".to_string(), big.narrow(0, 2, 3)?);
        tensors.insert("b.weight".to_string(), big.t()?);
        tensors.insert("c.bias".to_string(), big.get(1)?.to_dtype(DType::BF16)?);
        let dir = tempfile::tempdir().map_err(|e| Error::io(Path::new("tmp"), e))?;
        let ours = dir.path().join("ours.safetensors");
        save_tensors(&tensors, &ours)?;
        let plain = dir.path().join("plain.safetensors");
        let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
        let copies: Vec<(&str, Tensor)> = tensors
            .iter()
            .map(|(k, t)| (k.as_str(), t.contiguous().unwrap()))
            .collect();
        safetensors::serialize_to_file(copies.iter().map(|(k, t)| (*k, t)), Some(meta), &plain)
            .unwrap();
        let read = |p: &Path| std::fs::read(p).unwrap();
        assert_eq!(read(&ours), read(&plain));
        Ok(())
    }
}
