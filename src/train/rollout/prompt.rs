//! What each agent's model is fed: the scenario `template` filled from a dataset row, then — with
//! `agents.chat_template` — wrapped by a chat template (`auto`: the model's own, from its
//! `chat_template.jinja` / `tokenizer_config.json`; or a `.jinja` file) as a user message after the
//! optional `system_prompt`, ending in the assistant header (`add_generation_prompt=True`).
//! And whether a prompt fits its model: checked for every dataset prompt before training, and
//! for each transition's prompt before it is encoded.
use crate::error::{Error, Result};
use crate::model::Policy;
use comlrl_scenario::{AgentPlan, ChatTemplate, ChatTemplateSpec, Row, Scenario, Template};
use std::path::Path;

/// One agent's prompt formatting.
#[derive(Debug)]
pub struct PromptFormatter {
    agent: usize,
    template: Template,
    chat: Option<ChatTemplate>,
    system: Option<String>,
}

impl PromptFormatter {
    /// `chat`: the template selected by the agent's `chat_template` (see [`chat_template`]).
    pub fn new(agent: &AgentPlan, chat: Option<ChatTemplate>) -> Self {
        PromptFormatter {
            agent: agent.index,
            template: agent.template.clone(),
            chat,
            system: agent.system_prompt.clone(),
        }
    }

    /// The model input for `row`.
    pub fn render(&self, row: &Row) -> Result<String> {
        self.wrap(&self.template.render(row))
    }

    /// `text` wrapped by the chat template (unchanged without one).
    pub fn wrap(&self, text: &str) -> Result<String> {
        match &self.chat {
            None => Ok(text.to_string()),
            Some(t) => t
                .render(self.system.as_deref(), text)
                .map_err(|e| Error::from(e).for_agent(self.agent, None)),
        }
    }

    /// The chat template in use, if any.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat.as_ref()
    }
}

/// Every agent's formatter, in agent order; `None` for an agent held by another rank (its
/// prompts are formatted there). Beside them every agent's template, which needs no model: an
/// algorithm that reads the agents' prompts (MARLHF's reward model, on every rank) reads them
/// all.
#[derive(Debug)]
pub struct Prompts(pub Vec<Option<PromptFormatter>>, Vec<Template>);

impl Prompts {
    /// Built for loaded policies (their model directories hold the `auto` templates).
    pub fn for_policies(s: &Scenario, policies: &[Policy]) -> Result<Self> {
        s.agents
            .iter()
            .zip(policies)
            .map(|(a, p)| formatter(a, p).map(Some))
            .collect::<Result<Vec<_>>>()
            .map(|f| Prompts(f, templates(s)))
    }

    /// Built for the policies held by this rank (`None`: held by another).
    pub fn for_placed(s: &Scenario, policies: &[Option<Policy>]) -> Result<Self> {
        s.agents
            .iter()
            .zip(policies)
            .map(|(a, p)| p.as_ref().map(|p| formatter(a, p)).transpose())
            .collect::<Result<Vec<_>>>()
            .map(|f| Prompts(f, templates(s)))
    }

    /// Each agent's model input for `row` (empty for agents held by another rank).
    pub fn render(&self, row: &Row) -> Result<Vec<String>> {
        self.0
            .iter()
            .map(|f| f.as_ref().map_or(Ok(String::new()), |f| f.render(row)))
            .collect()
    }

    /// Each agent's prompt for `row` from its template alone, without the chat template (what
    /// CoMLRL's formatters return): every agent's, on every rank.
    pub fn formatted(&self, row: &Row) -> Vec<String> {
        self.1.iter().map(|t| t.render(row)).collect()
    }
}

/// Every agent's template, in agent order.
fn templates(s: &Scenario) -> Vec<Template> {
    s.agents.iter().map(|a| a.template.clone()).collect()
}

/// Agent `a`'s formatter, with the chat template found in its loaded policy's files.
pub(crate) fn formatter(a: &AgentPlan, p: &Policy) -> Result<PromptFormatter> {
    let dir = p.source.resolve_dir()?;
    let files = match (dir.as_deref(), p.built_tokenizer_config()) {
        (Some(d), _) => ModelFiles::Dir(d),
        (None, Some(tc)) => ModelFiles::Config(tc),
        (None, None) => ModelFiles::None,
    };
    let chat = chat_template(a, files, &p.source.describe())?;
    Ok(PromptFormatter::new(a, chat))
}

/// Where a model's own chat template is read from.
#[derive(Debug, Clone, Copy)]
pub enum ModelFiles<'a> {
    /// A Hugging Face model directory (`chat_template.jinja`, `tokenizer_config.json`).
    Dir(&'a Path),
    /// A `tokenizer_config.json` value built from GGUF metadata.
    Config(&'a serde_json::Value),
    /// No tokenizer files (built-in models).
    None,
}

/// The chat template an agent's `chat_template` selects; `model` names the model in errors.
/// `auto` without a template in the model's files is an error.
pub fn chat_template(
    agent: &AgentPlan,
    files: ModelFiles<'_>,
    model: &str,
) -> Result<Option<ChatTemplate>> {
    let fail = |msg: String| Error::Config(msg).for_agent(agent.index, None);
    match &agent.chat_template {
        ChatTemplateSpec::None => Ok(None),
        ChatTemplateSpec::File { path, source } => {
            ChatTemplate::new(path.display().to_string(), source.clone())
                .map(Some)
                .map_err(|e| Error::from(e).for_agent(agent.index, None))
        }
        ChatTemplateSpec::Auto => {
            let dir = match files {
                ModelFiles::Dir(d) => d,
                ModelFiles::Config(tc) => {
                    let name = format!("{model} (GGUF tokenizer.chat_template)");
                    return match ChatTemplate::from_tokenizer_config(&name, tc) {
                        Ok(Some(t)) => Ok(Some(t)),
                        Ok(None) => Err(fail(format!("`chat_template: auto`, but {model} has no `tokenizer.chat_template` in its metadata; use `chat_template: none` or a `.jinja` file"))),
                        Err(e) => Err(Error::from(e).for_agent(agent.index, None)),
                    };
                }
                ModelFiles::None => {
                    return Err(fail(format!(
                        "`chat_template: auto`, but {model} has no tokenizer files with a chat template; use `chat_template: none` or a `.jinja` file"
                    )))
                }
            };
            match ChatTemplate::from_model_dir(dir) {
                Ok(Some(t)) => Ok(Some(t)),
                Ok(None) => Err(fail(format!(
                    "`chat_template: auto`, but {model} has no chat template (no chat_template.jinja, and no `chat_template` in {}); use `chat_template: none` or a `.jinja` file",
                    dir.join("tokenizer_config.json").display()
                ))),
                Err(e) => Err(Error::from(e).for_agent(agent.index, None)),
            }
        }
    }
}

/// Fails when a first-turn prompt (train or eval set, rendered as the model sees it: the
/// agent's template, then its chat template with the system prompt) encodes to no tokens, or
/// its tokens plus `max_new_tokens` exceed the agent's model positions: the check sampling
/// would make at that step, made before training (and by `comlrl check`).
pub fn check_prompt_lengths(s: &Scenario, policies: &[Policy]) -> Result<()> {
    for (agent, p) in s.agents.iter().zip(policies) {
        check_agent_prompt_lengths(s, agent, p)?;
    }
    Ok(())
}

/// [`check_prompt_lengths`] for one agent.
pub fn check_agent_prompt_lengths(s: &Scenario, agent: &AgentPlan, p: &Policy) -> Result<()> {
    let sets = [
        ("training", Some(&s.dataset.train)),
        ("eval", s.dataset.eval.as_ref()),
    ];
    let max = p.model.max_positions();
    let new = agent.sampling.max_new_tokens;
    if new >= max {
        return Err(Error::Config(format!(
            "agent {}: max_new_tokens ({new}) leaves no room for a prompt in the model's {max} positions; \
             lower `agents.max_new_tokens`",
            agent.index
        )));
    }
    let formatter = formatter(agent, p)?;
    let room = max - new;
    for (what, set) in sets.iter().filter_map(|(w, d)| d.map(|d| (w, d))) {
        for (r, row) in set.rows.iter().enumerate() {
            let text = formatter.render(row)?;
            let fail = |found: String| {
                Error::Config(format!(
                    "agent {}: {what} prompt {} {found}; with max_new_tokens ({new}) it must fit \
                     between 1 and the model's {max} positions; shorten the prompt or lower \
                     `agents.max_new_tokens`",
                    agent.index,
                    r + 1,
                ))
            };
            check_prompt_bytes(&text, p, room).map_err(fail)?;
            let ids = p.tokenizer.encode(&text)?;
            if ids.is_empty() || ids.len() > room {
                return Err(fail(format!("encodes to {} tokens", ids.len())));
            }
        }
    }
    Ok(())
}

/// Refuses, before encoding, a prompt with more bytes than `room` tokens can stand for (see
/// `Tokenizer::max_bytes_for`); the error text says what was found.
pub fn check_prompt_bytes(text: &str, p: &Policy, room: usize) -> std::result::Result<(), String> {
    let most = p.tokenizer.max_bytes_for(room);
    match text.len() > most {
        true => Err(format!(
            "is {} bytes (as the model sees it), more than the {room} tokens left for a prompt \
             can hold with this tokenizer (at most {most} bytes)",
            text.len()
        )),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelSource;
    use comlrl_scenario::load_str;
    use std::path::PathBuf;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
    }

    fn scenario(dir: &Path, agent_lines: &str) -> Scenario {
        std::fs::write(dir.join("r.rhai"), "fn reward(c, ctx) { 1.0 }").expect("write");
        let text = format!(
            "dataset: {{prompts: [\"Tell a joke\", \"Hi\"]}}\nagents:\n  count: 2\n  model: builtin:tiny\n{agent_lines}reward: {{rhai: r.rhai}}\n"
        );
        load_str(&text, &dir.join("s.yaml"), &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn template_then_chat_template_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("c.jinja"),
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>",
        )
        .expect("write");
        let s = scenario(
            dir.path(),
            "  template: \"Q: {prompt}\"\n  chat_template: c.jinja\n  system_prompt: Be brief.\n",
        );
        let a = &s.agents[0];
        let f = PromptFormatter::new(
            a,
            chat_template(a, ModelFiles::None, "builtin:tiny").expect("ok"),
        );
        assert_eq!(
            f.render(&s.dataset.train.rows[0]).expect("renders"),
            "<system>Be brief.<user>Q: Tell a joke<assistant>"
        );
        assert_eq!(
            f.wrap("x").expect("wraps"),
            "<system>Be brief.<user>x<assistant>"
        );
        // Without a chat template the text is the model input.
        let s = scenario(dir.path(), "  template: \"Q: {prompt}\"\n");
        let a = &s.agents[0];
        let f = PromptFormatter::new(
            a,
            chat_template(a, ModelFiles::None, "builtin:tiny").expect("ok"),
        );
        assert!(f.chat_template().is_none());
        assert_eq!(
            f.render(&s.dataset.train.rows[1]).expect("renders"),
            "Q: Hi"
        );
    }

    #[test]
    fn auto_reads_the_model_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = scenario(dir.path(), "");
        let a = &mut s.agents[0];
        a.chat_template = ChatTemplateSpec::Auto;
        let qwen = fixtures().join("qwen25-tokenizer");
        let t = chat_template(a, ModelFiles::Dir(&qwen), "qwen")
            .expect("ok")
            .expect("a template");
        let f = PromptFormatter::new(a, Some(t));
        assert_eq!(
            f.wrap("Tell a joke about dinosaurs:").expect("renders"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nTell a joke about dinosaurs:<|im_end|>\n<|im_start|>assistant\n"
        );
        let e = chat_template(a, ModelFiles::Dir(&fixtures().join("tiny-llama")), "tiny")
            .unwrap_err()
            .chain();
        assert!(
            e.contains("agent 0") && e.contains("tiny-llama/tokenizer_config.json"),
            "{e}"
        );
        let e = chat_template(a, ModelFiles::None, "builtin:tiny")
            .unwrap_err()
            .chain();
        assert!(e.contains("builtin:tiny has no tokenizer files"), "{e}");
        assert_eq!(
            ModelSource::Local(qwen.clone()).cached_dir().unwrap(),
            Some(qwen)
        );
        assert_eq!(
            ModelSource::Builtin("tiny".into()).cached_dir().unwrap(),
            None
        );
    }

    #[test]
    fn auto_reads_a_gguf_files_metadata() {
        let gguf = fixtures().join("gguf/tiny-qwen2.q8_0.gguf");
        let policy = Policy::load(
            &ModelSource::Gguf(gguf.clone()),
            &crate::model::LoadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let text = policy
            .chat_template()
            .expect("the fixture has a template")
            .to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = scenario(dir.path(), "  system_prompt: S\n");
        s.agents.truncate(1);
        s.agents[0].chat_template = ChatTemplateSpec::Auto;
        let prompts = Prompts::for_policies(&s, std::slice::from_ref(&policy)).expect("formatters");
        let chat = prompts.0[0]
            .as_ref()
            .and_then(|f| f.chat_template())
            .expect("a chat template");
        assert!(chat.name().contains("GGUF"), "{}", chat.name());
        let want = ChatTemplate::new("t", text)
            .expect("compiles")
            .render(Some("S"), "Tell a joke")
            .expect("renders");
        assert_eq!(
            prompts.render(&s.dataset.train.rows[0]).expect("renders"),
            vec![want]
        );
    }
}
