//! The decodes of several adapted models on one frozen base, run together: each token step is
//! one forward over every model's active rows, whose products by the base's weights take all
//! the rows at once (the base read once per step, not once per model), while each row group
//! adds its own model's low-rank terms ([`GroupAdapters`]) and attends over its own KV cache
//! with its own mask ([`GroupedKv`]). Each model's prefill, sampling settings, EOS ids and RNG
//! streams stay its own, so every model samples what it samples alone, bit for bit: a base
//! product takes several groups' rows only where its kernel computes each row on its own
//! (`CopyProducts::row_wise`); elsewhere (gemm) each group's rows are multiplied apart.
use super::copies::CopyProducts;
use super::generate::{DecodeJob, Decoding, Sampler, Scored};
use super::kv_cache::KvCache;
use crate::model::decoder::adapted::same_base;
use crate::model::decoder::causal_lm::CausalLm;
use crate::model::decoder::forward::{KvStore, Mode, WeightProducts};
use crate::model::decoder::lora::{GroupAdapters, Lora};
use candle_core::{Result, Tensor, TensorId};
use rand::Rng;
use std::collections::HashMap;

impl Sampler<'_> {
    /// Whether this sampler and `other` decode on one base: the same base tensors (adapted
    /// copies of one model) and the same sampling copies of them, so one forward may serve
    /// both ([`generate_groups`]).
    pub fn shares_base(&self, other: &Sampler<'_>) -> bool {
        same_base(self.model, other.model) && self.copies.same_slots(other.copies)
    }
}

/// A decode that failed in one group's part (its checks, prefill or draws), or in the forward
/// all groups share (`group` None).
#[derive(Debug)]
pub struct GroupError {
    /// The group (index into the jobs) at fault, where one is.
    pub group: Option<usize>,
    /// What failed.
    pub error: candle_core::Error,
}

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for GroupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// Samples every job (as `generate_streams`/`generate_streams_scored` would, job g's rows from
/// `rngs[g]`: one stream per prompt, or one for all its prompts) in one decode whose token steps
/// run one forward for all jobs' active rows. Every job's sampler must share one base with the
/// first's ([`Sampler::shares_base`]). Returns each job's completions (and log-probs when its
/// job keeps them), the same as each would sample alone.
pub fn generate_groups<R: Rng>(
    jobs: &[DecodeJob<'_>],
    rngs: &mut [&mut [R]],
) -> std::result::Result<Vec<Scored>, GroupError> {
    let whole = |error| GroupError { group: None, error };
    let first = match jobs.first() {
        Some(j) => j.sampler,
        None => return Ok(Vec::new()),
    };
    if rngs.len() != jobs.len() {
        return Err(whole(candle_core::Error::Msg(format!(
            "grouped decode: {} RNG sets for {} jobs",
            rngs.len(),
            jobs.len()
        ))));
    }
    for (g, (job, r)) in jobs.iter().zip(rngs.iter()).enumerate() {
        let at = |msg: String| GroupError {
            group: Some(g),
            error: candle_core::Error::Msg(msg),
        };
        if !job.sampler.shares_base(&first) {
            return Err(at("grouped decode: not on the first job's base".into()));
        }
        if r.len() != 1 && r.len() != job.prompts.len() {
            return Err(at(format!(
                "generate_streams: {} RNG streams for {} prompts",
                r.len(),
                job.prompts.len()
            )));
        }
    }
    let model = first.model;
    let products = first.copies.products(Mode::Sample);
    let adapters = group_adapters(model, jobs).map_err(whole)?;
    let mut decodes = jobs
        .iter()
        .enumerate()
        .map(|(g, job)| {
            Decoding::start(job).map_err(|error| GroupError {
                group: Some(g),
                error,
            })
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    loop {
        // Each group draws from its own logits with its own streams; finished groups leave.
        let mut live = Vec::with_capacity(decodes.len());
        for (g, d) in decodes.iter_mut().enumerate() {
            if d.pick(&jobs[g], rngs[g]).map_err(|error| GroupError {
                group: Some(g),
                error,
            })? {
                live.push(g);
            }
        }
        if live.is_empty() {
            break;
        }
        step(model, products, &adapters, &mut decodes, &live).map_err(whole)?;
    }
    Ok(decodes.into_iter().map(Decoding::finish).collect())
}

/// Each base weight's adapters, by group: what [`GroupedProducts`] hands the projections.
type AdapterMap = HashMap<TensorId, Vec<Option<Lora>>>;

/// For every projection of `model`, each job's model's adapter on it.
fn group_adapters(model: &CausalLm, jobs: &[DecodeJob<'_>]) -> Result<AdapterMap> {
    let mut map: AdapterMap = HashMap::new();
    for job in jobs {
        for (base, own) in model.layers().iter().zip(job.sampler.model.layers()) {
            for (b, o) in base.linears().into_iter().zip(own.linears()) {
                if b.weight().id() != o.weight().id() {
                    candle_core::bail!("grouped decode: a projection of another base");
                }
                map.entry(b.weight().id()).or_default().push(o.lora.clone());
            }
        }
    }
    Ok(map)
}

/// One token step of the live groups `live`: one forward over their rows (in group order),
/// each group's logits then its own.
fn step(
    model: &CausalLm,
    copies: CopyProducts<'_>,
    adapters: &AdapterMap,
    decodes: &mut [Decoding],
    live: &[usize],
) -> Result<()> {
    let mut ids = Vec::with_capacity(live.len());
    let mut pos = Vec::with_capacity(live.len());
    let mut masks = Vec::with_capacity(live.len());
    let mut rows = Vec::with_capacity(live.len());
    for &g in live {
        let (i, p, m) = decodes[g].step_inputs()?;
        rows.push(i.dim(0)?);
        ids.push(i);
        pos.push(p);
        // As `CausalLm::hidden` converts the mask it is handed.
        masks.push(m.to_dtype(model.dtype())?);
    }
    let live_adapters: HashMap<TensorId, Vec<Option<Lora>>> = adapters
        .iter()
        .map(|(id, per)| (*id, live.iter().map(|&g| per[g].clone()).collect()))
        .collect();
    let products = GroupedProducts {
        copies,
        rows: &rows,
        adapters: &live_adapters,
    };
    // The live groups' caches, in `live` order (increasing indices).
    let caches: Vec<&mut KvCache> = decodes
        .iter_mut()
        .enumerate()
        .filter(|(g, _)| live.contains(g))
        .map(|(_, d)| &mut d.cache)
        .collect();
    let mut kv = GroupedKv {
        caches,
        rows: &rows,
        masks: &masks,
    };
    let hidden = model.hidden(
        &Tensor::cat(&ids, 0)?,
        &Tensor::cat(&pos, 0)?,
        &masks[0],
        Some(&mut kv),
        products,
    )?;
    let logits = model.logits_mode(&hidden, products)?.squeeze(1)?;
    let mut r0 = 0;
    for (&g, &n) in live.iter().zip(&rows) {
        decodes[g].logits = logits.narrow(0, r0, n)?;
        r0 += n;
    }
    Ok(())
}

/// The KV caches of the groups of one grouped forward: group g's `rows[g]` rows append to and
/// attend over `caches[g]` alone, under `masks[g]` (its own past length).
struct GroupedKv<'a, 'c> {
    caches: Vec<&'c mut KvCache>,
    rows: &'a [usize],
    masks: &'a [Tensor],
}

impl KvStore for GroupedKv<'_, '_> {
    fn append(&mut self, _layer: usize, _k: &Tensor, _v: &Tensor) -> Result<(Tensor, Tensor)> {
        candle_core::bail!("a grouped KV store attends each group apart: use `attend`")
    }

    fn advance(&mut self, s: usize) {
        for c in &mut self.caches {
            c.advance(s);
        }
    }

    fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        _mask: &Tensor,
        attend: &dyn Fn(&Tensor, &Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let mut parts = Vec::with_capacity(self.rows.len());
        let mut r0 = 0;
        for ((c, &n), mask) in self.caches.iter_mut().zip(self.rows).zip(self.masks) {
            let (kg, vg) = c.append(layer, &k.narrow(0, r0, n)?, &v.narrow(0, r0, n)?)?;
            parts.push(attend(&q.narrow(0, r0, n)?, &kg, &vg, mask)?);
            r0 += n;
        }
        Tensor::cat(&parts, 0)
    }
}

/// The products of a grouped forward: the base's sampling copies for the base weights, all
/// groups' rows in one product where the kernel computes rows on their own
/// ([`CopyProducts::row_wise`], in products of at most its row count), each group apart
/// otherwise; each group's own adapters ([`GroupAdapters`]).
#[derive(Clone, Copy)]
struct GroupedProducts<'a> {
    copies: CopyProducts<'a>,
    rows: &'a [usize],
    adapters: &'a HashMap<TensorId, Vec<Option<Lora>>>,
}

impl WeightProducts for GroupedProducts<'_> {
    fn mode(&self) -> Mode {
        Mode::Sample
    }

    fn x_wt(&self, x: &Tensor, w: &Tensor) -> Result<Tensor> {
        let total = x.dim(0)?;
        let rows = self.rows;
        if rows.iter().sum::<usize>() != total {
            candle_core::bail!("grouped product: {total} rows for groups of {rows:?}");
        }
        let chunk = self.copies.row_wise(w, rows[0]);
        let parts: Vec<(usize, usize)> = match chunk {
            // One product per `c` rows: each row's bits as in its group's own product (which
            // took the same kernel: every group's rows fit `c`).
            Some(c) if rows.iter().all(|&n| self.copies.row_wise(w, n) == Some(c)) => (0..total)
                .step_by(c.max(1))
                .map(|r0| (r0, c.min(total - r0)))
                .collect(),
            _ => rows
                .iter()
                .scan(0, |r0, &n| {
                    let at = *r0;
                    *r0 += n;
                    Some((at, n))
                })
                .collect(),
        };
        if parts.len() == 1 {
            return self.copies.x_wt(x, w);
        }
        let ys = parts
            .iter()
            .map(|&(r0, n)| self.copies.x_wt(&x.narrow(0, r0, n)?, w))
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&ys, 0)
    }

    fn group_adapters(&self, w: &Tensor) -> Option<GroupAdapters<'_>> {
        self.adapters.get(&w.id()).map(|adapters| GroupAdapters {
            rows: self.rows,
            adapters,
        })
    }
}
