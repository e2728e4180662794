//! Which decoder a `config.json` describes: the architecture (Qwen2, Llama, Qwen3) and the
//! switches of the one decoder implementation every architecture maps to (which projections
//! carry biases, per-head q/k RMSNorm, RoPE base and scaling).
use super::rope_scaling::RopeSpec;

/// Architectures this crate can load (the `architectures` / `model_type` of `config.json`).
pub const SUPPORTED_ARCHITECTURES: &[&str] =
    &["Qwen2ForCausalLM", "LlamaForCausalLM", "Qwen3ForCausalLM"];

/// The architectures this crate loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// `Qwen2ForCausalLM`: q/k/v biases, no o_proj / MLP biases.
    Qwen2,
    /// `LlamaForCausalLM` (Llama 2/3.x, SmolLM, TinyLlama): biases only with
    /// `attention_bias` / `mlp_bias`.
    Llama,
    /// `Qwen3ForCausalLM`: per-head RMSNorm on q and k before RoPE, biases only with
    /// `attention_bias`.
    Qwen3,
}

impl Architecture {
    /// Every supported architecture: its class name and its `model_type`.
    pub const ALL: [(Architecture, &'static str, &'static str); 3] = [
        (Architecture::Qwen2, "Qwen2ForCausalLM", "qwen2"),
        (Architecture::Llama, "LlamaForCausalLM", "llama"),
        (Architecture::Qwen3, "Qwen3ForCausalLM", "qwen3"),
    ];

    /// The transformers class name (`architectures` entry).
    pub fn class_name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(a, _, _)| *a == self)
            .map_or("", |(_, c, _)| c)
    }

    /// The `model_type` transformers writes for it.
    pub fn model_type(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(a, _, _)| *a == self)
            .map_or("", |(_, _, t)| t)
    }

    /// The first supported entry of `architectures`, else (no such list) the `model_type`.
    pub fn from_names(architectures: &[String], model_type: Option<&str>) -> Result<Self, String> {
        let hit = if architectures.is_empty() {
            Self::ALL.iter().find(|(_, _, t)| Some(*t) == model_type)
        } else {
            architectures
                .iter()
                .find_map(|name| Self::ALL.iter().find(|(_, c, _)| c == name))
        };
        if let Some((a, _, _)) = hit {
            return Ok(*a);
        }
        let found = if architectures.is_empty() {
            format!("model_type {:?}", model_type.unwrap_or("<missing>"))
        } else {
            format!("architectures {architectures:?}")
        };
        Err(format!(
            "unsupported architecture ({found}); supported: {}",
            SUPPORTED_ARCHITECTURES.join(", ")
        ))
    }
}

/// The switches of the decoder for one config.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Features {
    /// The decoder family.
    pub arch: Architecture,
    /// Biases on q_proj, k_proj and v_proj.
    pub qkv_bias: bool,
    /// A bias on o_proj.
    pub o_bias: bool,
    /// Biases on gate_proj, up_proj and down_proj.
    pub mlp_bias: bool,
    /// RMSNorm over each head of q and k (`self_attn.q_norm` / `k_norm`, weights [head_dim]).
    pub qk_norm: bool,
    /// RoPE frequencies and scaling.
    pub rope: RopeSpec,
}

impl Architecture {
    /// The decoder's switches for this architecture, given the config's `attention_bias` and
    /// `mlp_bias` (unset: false) and its RoPE.
    pub fn features(
        self,
        attention_bias: Option<bool>,
        mlp_bias: Option<bool>,
        rope: RopeSpec,
    ) -> Features {
        let attention_bias = attention_bias.unwrap_or(false);
        let arch = self;
        match self {
            Architecture::Qwen2 => Features {
                arch,
                qkv_bias: true,
                o_bias: false,
                mlp_bias: false,
                qk_norm: false,
                rope,
            },
            Architecture::Llama => Features {
                arch,
                qkv_bias: attention_bias,
                o_bias: attention_bias,
                mlp_bias: mlp_bias.unwrap_or(false),
                qk_norm: false,
                rope,
            },
            Architecture::Qwen3 => Features {
                arch,
                qkv_bias: attention_bias,
                o_bias: attention_bias,
                mlp_bias: false,
                qk_norm: true,
                rope,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_model_types_map_to_architectures() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Architecture::from_names(&names(&["LlamaForCausalLM"]), None),
            Ok(Architecture::Llama)
        );
        assert_eq!(
            Architecture::from_names(&[], Some("qwen3")),
            Ok(Architecture::Qwen3)
        );
        let e = Architecture::from_names(&names(&["Qwen3MoeForCausalLM"]), Some("qwen3_moe"))
            .unwrap_err();
        assert!(
            e.contains("Qwen3MoeForCausalLM")
                && e.contains("LlamaForCausalLM, Qwen3ForCausalLM")
                && e.contains("Qwen2ForCausalLM"),
            "{e}"
        );
        for (a, c, t) in Architecture::ALL {
            assert_eq!((a.class_name(), a.model_type()), (c, t));
        }
    }
}
