//! Data-parallel replicas of an agent (`agents[i].replicas`): each agent with more than one
//! replica gets a sub-world of its replica ranks; after each mini-batch's passes (split over
//! the replicas, see `update::Share`) the gradients are summed over it, so every replica takes
//! the same optimizer step; at each checkpoint a checksum of the weights is compared across
//! the replicas. Only the first replica samples the agent and writes its files.
use crate::dist::codec::{Dec, Enc};
use crate::dist::{Placement, World};
use crate::error::{Error, Result};
use crate::model::Policy;
use crate::train::update::{LossGrads, Share};
use candle_core::{DType, Tensor, Var};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Each agent's replica group as seen from this rank (`None`: one copy, or not held here).
pub struct Replicas {
    groups: Vec<Option<Arc<dyn World>>>,
    /// Some agent of the run has replicas (on any rank).
    any: bool,
}

impl Replicas {
    /// Splits `world` into one sub-world per replicated agent, in agent order. A collective:
    /// every rank calls it with the same placement.
    pub fn new(placement: &Placement, world: &dyn World) -> Self {
        let groups = placement
            .replicas
            .iter()
            .enumerate()
            .map(|(i, r)| match r.len() > 1 {
                true => world.split(placement.replica_of(i).map(|(j, _)| j)),
                false => None,
            })
            .collect();
        Replicas {
            groups,
            any: placement.replicated(),
        }
    }

    /// No agent is replicated.
    pub fn none(agents: usize) -> Self {
        Replicas {
            groups: vec![None; agents],
            any: false,
        }
    }

    /// Whether the agents' updates must run one after the other on this thread: a replicated
    /// agent's collectives call MPI, which only the thread that initialized it may.
    pub fn on_this_thread(&self) -> bool {
        self.any
    }

    /// The passes of agent `i`'s mini-batches this rank computes.
    pub fn share(&self, i: usize) -> Share {
        match self.groups.get(i).and_then(Option::as_ref) {
            Some(g) => Share {
                index: g.rank(),
                of: g.size(),
            },
            None => Share::ALL,
        }
    }

    /// Sums agent `i`'s gradients, pass losses and pass entropies over its replicas (a
    /// collective of the replicas; nothing for an agent with one copy). Afterwards `lg.loss`
    /// (and the entropy) is the mini-batch's, added up in pass order, as one process computes it.
    pub fn reduce(&self, i: usize, vars: &[Var], lg: &mut LossGrads) -> Result<()> {
        let Some(g) = self.groups.get(i).and_then(Option::as_ref) else {
            return Ok(());
        };
        // Which variables got a gradient on any replica.
        let mut present: Vec<f32> = lg.grads.iter().map(|g| f32::from(g.is_some())).collect();
        g.all_reduce_sum(&mut present);
        let mut floats = present.len();
        for ((v, slot), p) in vars.iter().zip(lg.grads.iter_mut()).zip(&present) {
            if *p == 0.0 {
                continue;
            }
            let t = v.as_tensor();
            let mut buf = match slot.as_ref() {
                Some(x) => x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?,
                None => vec![0f32; t.elem_count()],
            };
            floats += buf.len();
            g.all_reduce_sum(&mut buf);
            *slot = Some(Tensor::from_vec(buf, t.dims(), t.device())?.to_dtype(t.dtype())?);
        }
        let mut e = Enc::default();
        e.usize(lg.passes.len());
        for &(p, l) in &lg.passes {
            e.usize(p).f64(l);
        }
        e.usize(lg.pass_entropy.len());
        for &(p, h, n) in &lg.pass_entropy {
            e.usize(p).f64(h).f64(n);
        }
        e.usize(lg.pass_kl.len());
        for &(group, row, k, n) in &lg.pass_kl {
            e.usize(group).usize(row).f64(k).f64(n);
        }
        let mut all = Vec::new();
        let mut entropy = Vec::new();
        let mut kl = Vec::new();
        for (r, packet) in g.all_gather(&e.0).iter().enumerate() {
            let what = format!("agent {i}'s pass losses from replica {r}");
            let mut d = Dec::new(packet, &what);
            for _ in 0..d.usize()? {
                all.push((d.usize()?, d.f64()?));
            }
            for _ in 0..d.usize()? {
                entropy.push((d.usize()?, d.f64()?, d.f64()?));
            }
            for _ in 0..d.usize()? {
                kl.push((d.usize()?, d.usize()?, d.f64()?, d.f64()?));
            }
            d.end()?;
        }
        // The logged entropy is the whole mini-batch's, summed in pass order as one process
        // sums it.
        entropy.sort_by_key(|&(p, _, _)| p);
        lg.entropy_sum = entropy.iter().fold(0f64, |acc, &(_, h, _)| acc + h);
        lg.entropy_tokens = entropy.iter().fold(0f64, |acc, &(_, _, n)| acc + n);
        lg.pass_entropy = entropy;
        // The logged KL of `kl_in_loss` is the whole mini-batch's too (`LossGrads::token_kl`).
        lg.pass_kl = kl;
        log::debug!(
            "agent {i}: gradients all-reduced over {} replicas: {} bytes each",
            g.size(),
            4 * floats + e.0.len()
        );
        all.sort_by_key(|&(p, _)| p);
        lg.loss = all.iter().fold(0f64, |acc, &(_, l)| acc + l);
        lg.passes = all;
        Ok(())
    }

    /// Checks that every replica of each agent held here has the same weights (a SHA-256 of
    /// their bits, all-gathered over the replicas); a mismatch is an error naming the agent
    /// and the ranks. A collective of each agent's replicas, in agent order.
    pub fn check_identical(
        &self,
        policies: &[Option<Policy>],
        placement: &Placement,
        step: usize,
    ) -> Result<()> {
        for (i, g) in self.groups.iter().enumerate() {
            let (Some(g), Some(p)) = (g, policies.get(i).and_then(Option::as_ref)) else {
                continue;
            };
            let mine = checksum(p)?;
            let sums = g.all_gather(&mine);
            if let Some(j) = sums.iter().position(|s| *s != sums[0]) {
                let ranks = &placement.replicas[i];
                return Err(Error::Distributed(format!(
                    "agent {i}'s replicas diverged at step {step}: the weights on rank {} \
                     (checksum {}) differ from those on rank {} (checksum {}); replicas must \
                     run the same binary with the same thread count (RAYON_NUM_THREADS)",
                    ranks[j],
                    hex(&sums[j]),
                    ranks[0],
                    hex(&sums[0]),
                )));
            }
        }
        Ok(())
    }
}

/// SHA-256 over the policy's weights (in variable-name order, as f32 bits).
fn checksum(p: &Policy) -> Result<Vec<u8>> {
    let mut h = Sha256::new();
    for (name, v) in p.vars() {
        h.update(name.as_bytes());
        let vals = v
            .as_tensor()
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let bytes: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
        h.update(&bytes);
    }
    Ok(h.finalize().to_vec())
}

fn hex(b: &[u8]) -> String {
    b.iter().take(8).map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LoadOptions, ModelSource};

    /// Replica 0 of a two-replica group whose other replica reports `other` as its checksum
    /// and, in an all-reduce, the same buffer as this one.
    #[derive(Debug)]
    struct Pair {
        other: Vec<u8>,
    }

    impl World for Pair {
        fn rank(&self) -> usize {
            0
        }
        fn size(&self) -> usize {
            2
        }
        fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
            vec![mine.to_vec(), self.other.clone()]
        }
        fn broadcast(&self, _: usize, data: Vec<u8>) -> Vec<u8> {
            data
        }
        fn gather(&self, _: usize, mine: &[u8]) -> Option<Vec<Vec<u8>>> {
            Some(vec![mine.to_vec(), self.other.clone()])
        }
        fn all_reduce_sum(&self, buf: &mut [f32]) {
            buf.iter_mut().for_each(|x| *x *= 2.0);
        }
        fn barrier(&self) {}
        fn split(&self, _: Option<usize>) -> Option<Arc<dyn World>> {
            None
        }
        fn abort(&self, msg: &str) -> ! {
            panic!("{msg}")
        }
    }

    fn placement() -> Placement {
        Placement {
            owners: vec![2],
            replicas: vec![vec![2, 3]],
            me: 2,
            size: 4,
        }
    }

    #[test]
    fn diverged_replicas_are_an_error_naming_the_agent_and_ranks() {
        let p = Policy::load(
            &ModelSource::Builtin("tiny".into()),
            &LoadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let sum = checksum(&p).expect("checksum");
        assert_eq!(sum, checksum(&p).expect("checksum"), "deterministic");
        let policies = vec![Some(p)];
        let same = Replicas {
            groups: vec![Some(Arc::new(Pair { other: sum.clone() }))],
            any: true,
        };
        same.check_identical(&policies, &placement(), 5)
            .expect("identical replicas pass");
        let mut other = sum.clone();
        other[0] ^= 1;
        let diverged = Replicas {
            groups: vec![Some(Arc::new(Pair { other }))],
            any: true,
        };
        let e = diverged
            .check_identical(&policies, &placement(), 5)
            .expect_err("diverged")
            .to_string();
        assert!(
            e.contains("agent 0's replicas diverged at step 5")
                && e.contains("on rank 3")
                && e.contains("on rank 2"),
            "{e}"
        );
        assert_eq!(same.share(0).index, 0);
        assert_eq!(same.share(0).of, 2);
    }

    #[test]
    fn reduce_sums_gradients_and_adds_pass_losses_in_pass_order() {
        let dev = candle_core::Device::Cpu;
        let vars: Vec<Var> = (0..2)
            .map(|_| Var::zeros((2, 2), DType::F32, &dev).expect("var"))
            .collect();
        let g = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &dev).expect("tensor");
        let mut lg = LossGrads {
            loss: 0.625,
            grads: vec![Some(g), None],
            forward_s: 0.0,
            backward_s: 0.0,
            flops: 0.0,
            kept_layers: 0,
            kept_bytes_max: 0,
            passes: vec![(0, 0.5), (2, 0.125)],
            pass_entropy: vec![(0, 3.0, 4.0)],
            // kl_in_loss: Σ k3 and the tokens of the pass that starts at completion 2.
            pass_kl: vec![(0, 2, 0.5, 10.0)],
            skipped: 0,
            ..Default::default()
        };
        // The other replica computed pass 1 (completion 1 on).
        let mut other = Enc::default();
        other.usize(1).usize(1).f64(0.25);
        other.usize(1).usize(1).f64(1.5).f64(2.0);
        other.usize(1).usize(0).usize(1).f64(0.25).f64(5.0);
        let r = Replicas {
            groups: vec![Some(Arc::new(Pair { other: other.0 }))],
            any: true,
        };
        r.reduce(0, &vars, &mut lg).expect("reduce");
        // `Pair` stands for a replica with the same gradients: the sum doubles them.
        let summed = lg.grads[0].as_ref().expect("a gradient");
        assert_eq!(
            summed.to_vec2::<f32>().expect("values"),
            vec![vec![2.0, 4.0], vec![6.0, 8.0]]
        );
        assert!(lg.grads[1].is_none(), "no replica had a gradient for it");
        assert_eq!(lg.passes, vec![(0, 0.5), (1, 0.25), (2, 0.125)]);
        assert_eq!(lg.loss, 0.5 + 0.25 + 0.125);
        assert_eq!((lg.entropy_sum, lg.entropy_tokens), (4.5, 6.0));
        assert_eq!(lg.entropy_mean(), Some(0.75));
        // The logged KL is the whole mini-batch's mean, not this replica's 0.05.
        assert_eq!(lg.pass_kl.len(), 2);
        assert_eq!(lg.token_kl(), Some((0.25 + 0.5) / 15.0));
        // An agent with one copy is left alone.
        let mut again = LossGrads {
            passes: vec![],
            ..lg
        };
        Replicas::none(1)
            .reduce(0, &vars, &mut again)
            .expect("no-op");
        assert_eq!(again.loss, 0.875);
    }
}
