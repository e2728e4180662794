//! llama.cpp ↔ Hugging Face tensor names, and the q/k row permutation llama.cpp applies to
//! Llama checkpoints (convert_hf_to_gguf.py's `LlamaModel.permute`) and its inverse.
use candle_core::{Result, Tensor};

/// Per-layer suffixes: (llama.cpp, HF) without `blk.N.` / `model.layers.N.` and `.weight`/`.bias`.
const LAYER: &[(&str, &str)] = &[
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Whole-model tensors (full names).
const GLOBAL: &[(&str, &str)] = &[
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
];

/// The HF name of a llama.cpp tensor, `None` for tensors the model does not use.
pub fn hf_name(gguf: &str) -> Option<String> {
    if let Some((_, hf)) = GLOBAL.iter().find(|(g, _)| *g == gguf) {
        return Some(hf.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (stem, kind) = rest.rsplit_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    let (_, hf) = LAYER.iter().find(|(g, _)| *g == stem)?;
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// The llama.cpp name of an HF tensor, `None` for names outside the decoder's set.
pub fn gguf_name(hf: &str) -> Option<String> {
    if let Some((g, _)) = GLOBAL.iter().find(|(_, h)| *h == hf) {
        return Some(g.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (stem, kind) = rest.rsplit_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    let (g, _) = LAYER.iter().find(|(_, h)| *h == stem)?;
    Some(format!("blk.{layer}.{g}.{kind}"))
}

/// Which head count a Llama q/k tensor is permuted with: `Some(n_head)` for `q_proj`,
/// `Some(n_kv_head)` for `k_proj`, `None` for every other tensor.
pub fn permuted_heads(hf: &str, n_head: usize, n_kv_head: usize) -> Option<usize> {
    let stem = hf.strip_suffix(".weight").or(hf.strip_suffix(".bias"))?;
    if stem.ends_with(".self_attn.q_proj") {
        Some(n_head)
    } else if stem.ends_with(".self_attn.k_proj") {
        Some(n_kv_head)
    } else {
        None
    }
}

/// llama.cpp's permutation of rows (HF → GGUF): within each head, the two rotary halves are
/// interleaved (`reshape(n_head, 2, d/2, …).swapaxes(1, 2)`).
pub fn permute(t: &Tensor, n_head: usize) -> Result<Tensor> {
    regroup(t, n_head, true)
}

/// The inverse of [`permute`] (GGUF → HF): `reshape(n_head, d/2, 2, …).swapaxes(1, 2)`.
pub fn unpermute(t: &Tensor, n_head: usize) -> Result<Tensor> {
    regroup(t, n_head, false)
}

fn regroup(t: &Tensor, n_head: usize, forward: bool) -> Result<Tensor> {
    let dims = t.dims().to_vec();
    let Some(&rows) = dims.first() else {
        candle_core::bail!("cannot permute a scalar into {n_head} heads");
    };
    if n_head == 0 || !rows.is_multiple_of(2 * n_head) {
        candle_core::bail!("cannot permute {rows} rows into {n_head} heads of rotary pairs");
    }
    let half = rows / n_head / 2;
    let rest: Vec<usize> = dims[1..].to_vec();
    let mut shape = vec![n_head];
    if forward {
        shape.extend([2, half]);
    } else {
        shape.extend([half, 2]);
    }
    shape.extend(&rest);
    t.reshape(shape)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn names_round_trip_both_ways() {
        let pairs = [
            ("token_embd.weight", "model.embed_tokens.weight"),
            ("output.weight", "lm_head.weight"),
            ("output_norm.weight", "model.norm.weight"),
            (
                "blk.0.attn_q.weight",
                "model.layers.0.self_attn.q_proj.weight",
            ),
            ("blk.3.attn_k.bias", "model.layers.3.self_attn.k_proj.bias"),
            (
                "blk.11.attn_output.weight",
                "model.layers.11.self_attn.o_proj.weight",
            ),
            (
                "blk.1.attn_q_norm.weight",
                "model.layers.1.self_attn.q_norm.weight",
            ),
            (
                "blk.1.attn_k_norm.weight",
                "model.layers.1.self_attn.k_norm.weight",
            ),
            (
                "blk.2.attn_norm.weight",
                "model.layers.2.input_layernorm.weight",
            ),
            (
                "blk.2.ffn_norm.weight",
                "model.layers.2.post_attention_layernorm.weight",
            ),
            (
                "blk.2.ffn_gate.weight",
                "model.layers.2.mlp.gate_proj.weight",
            ),
            ("blk.2.ffn_up.weight", "model.layers.2.mlp.up_proj.weight"),
            (
                "blk.2.ffn_down.weight",
                "model.layers.2.mlp.down_proj.weight",
            ),
        ];
        for (g, h) in pairs {
            assert_eq!(hf_name(g).as_deref(), Some(h), "{g}");
            assert_eq!(gguf_name(h).as_deref(), Some(g), "{h}");
        }
        assert_eq!(hf_name("rope_freqs.weight"), None);
        assert_eq!(hf_name("blk.x.attn_q.weight"), None);
        assert_eq!(
            gguf_name("model.layers.0.self_attn.rotary_emb.inv_freq"),
            None
        );
    }

    #[test]
    fn permutation_matches_convert_hf_to_gguf_and_inverts() {
        // 2 heads of head_dim 4 over 3 columns: row r holds r*10 + c.
        let data: Vec<f32> = (0..8)
            .flat_map(|r| (0..3).map(move |c| (r * 10 + c) as f32))
            .collect();
        let t = Tensor::from_vec(data, (8, 3), &Device::Cpu).unwrap();
        let p = permute(&t, 2).unwrap();
        // numpy: w.reshape(2, 2, 2, 3).swapaxes(1, 2).reshape(8, 3) → rows 0,2,1,3,4,6,5,7.
        let rows: Vec<f32> = p.to_vec2::<f32>().unwrap().iter().map(|r| r[0]).collect();
        assert_eq!(rows, vec![0., 20., 10., 30., 40., 60., 50., 70.]);
        let back = unpermute(&p, 2).unwrap();
        assert_eq!(back.to_vec2::<f32>().unwrap(), t.to_vec2::<f32>().unwrap());
        // head_dim 8: the two operations differ, and still invert each other.
        let t1 = Tensor::arange(0f32, 16., &Device::Cpu).unwrap();
        let p1 = permute(&t1, 2).unwrap();
        assert_eq!(
            p1.to_vec1::<f32>().unwrap(),
            vec![0., 4., 1., 5., 2., 6., 3., 7., 8., 12., 9., 13., 10., 14., 11., 15.]
        );
        assert_ne!(
            unpermute(&t1, 2).unwrap().to_vec1::<f32>().unwrap(),
            p1.to_vec1::<f32>().unwrap()
        );
        assert_eq!(
            unpermute(&p1, 2).unwrap().to_vec1::<f32>().unwrap(),
            t1.to_vec1::<f32>().unwrap()
        );
        assert!(permute(&t1, 3).is_err());
    }

    #[test]
    fn only_q_and_k_are_permuted() {
        let (h, kv) = (8, 2);
        assert_eq!(
            permuted_heads("model.layers.0.self_attn.q_proj.weight", h, kv),
            Some(8)
        );
        assert_eq!(
            permuted_heads("model.layers.0.self_attn.k_proj.bias", h, kv),
            Some(2)
        );
        assert_eq!(
            permuted_heads("model.layers.0.self_attn.v_proj.weight", h, kv),
            None
        );
        assert_eq!(
            permuted_heads("model.layers.0.self_attn.q_norm.weight", h, kv),
            None
        );
    }
}
