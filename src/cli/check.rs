//! `comlrl check`: validate a scenario (syntax, values, files, reward scripts and plugins, model
//! references, chat templates of models on this machine, prompt lengths against the loaded
//! models) without training or downloading, and print the resolved scenario with each agent's
//! first prompt as the model sees it.
use super::scenario_args::ScenarioArgs;
use comlrl::model::ModelSource;
use comlrl::train::rollout::joint::check_joint_actions;
use comlrl::train::rollout::prompt::check_prompt_lengths;
use comlrl::train::rollout::prompt::{chat_template, ModelFiles, PromptFormatter};
use comlrl::train::run::dir::guard_output_dir;
use comlrl::train::setup::{models, rewards};
use comlrl_scenario::{ChatTemplateSpec, Scenario};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Print the resolved scenario (every default filled in) as YAML, then each agent's first
    /// training prompt as the model sees it (template and chat template applied) as comments.
    #[arg(long)]
    pub print: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let s = a.scenario.load()?;
    guard_output_dir(&s)?;
    let stack = rewards::reward_stack(&s)?;
    rewards::transition(&s)?;
    let mut seen = std::collections::HashSet::new();
    for agent in &s.agents {
        // Agents sharing a model (`agents.count`) need its files checked once.
        if !seen.insert(&agent.model.spec) {
            continue;
        }
        let src = models::model_source(agent, &s.base_dir)?;
        if let comlrl::model::ModelSource::Local(dir) = &src {
            if !dir.join("config.json").is_file() {
                anyhow::bail!(
                    "agent {}: {} has no config.json",
                    agent.index,
                    dir.display()
                );
            }
        }
        if let comlrl::model::ModelSource::Gguf(path) = &src {
            // Header only: metadata → config and tokenizer, without reading the weights.
            let (content, mut f) = comlrl::model::io::gguf::read::read_header(path)?;
            comlrl::model::io::gguf::read::describe(path, &content, &mut f)
                .map_err(|e| comlrl::Error::from(e).for_agent(agent.index, None))?;
        }
    }
    // The models on this machine are loaded for the checks `run` makes before training
    // (prompt lengths): a scenario that passes `check` does not fail them. `check` never
    // downloads: with a Hub model that is not cached, `run` makes these checks.
    check_joint_actions(&s)?;
    // A centralized actor is checked as it runs: one model, agent 0's, with the joint prompt.
    let roles = comlrl::train::setup::centralized::roles(&s);
    let run_as = match roles {
        Some(_) => comlrl::train::setup::centralized::actor_scenario(&s)?,
        None => s.clone(),
    };
    let on_this_machine = |a: &comlrl_scenario::AgentPlan| -> anyhow::Result<bool> {
        let src = models::model_source(a, &s.base_dir)?;
        Ok(!matches!(src, ModelSource::Hub { .. }) || src.cached_dir()?.is_some())
    };
    let mut local = true;
    for a in &run_as.agents {
        local &= on_this_machine(a)?;
    }
    // Before any model is loaded: a scenario that cannot fit is refused here as `run` would.
    let memory = comlrl::train::setup::memory::estimate(
        &run_as,
        |_| true,
        |_| true,
        comlrl::train::setup::memory::Lookup::Local,
    )?;
    eprintln!("{}", memory.report());
    comlrl::train::setup::memory::enforce(memory)?;
    if local {
        let policies = models::load_policies(&run_as, true)?;
        check_prompt_lengths(&run_as, &policies)?;
    } else {
        eprintln!(
            "note: a model is not in the Hugging Face cache; prompt lengths are checked by `comlrl run` once it is downloaded"
        );
    }
    let first = first_prompts(&run_as)?;
    if a.print {
        print!("{}", s.to_yaml());
        for (i, p) in first.iter().enumerate() {
            println!("# agent {i}: first training prompt as the model sees it:");
            match p {
                Some(p) => {
                    for line in format!("{p:?}").lines() {
                        println!("#   {line}");
                    }
                }
                None => println!(
                    "#   (not rendered: the model's chat template is read when it is loaded)"
                ),
            }
        }
    }
    eprintln!(
        "{}: ok — {} agents{}, {} training prompts, {} epochs, K = {}, rewards: {}",
        a.scenario.scenario.display(),
        s.agents.len(),
        if roles.is_some() {
            " (one centralized actor: agent 0's model)"
        } else {
            ""
        },
        s.dataset.train.rows.len(),
        s.run_epochs(),
        s.trainer.num_generations,
        stack.component_names().join(", ")
    );
    if let Some(line) = centralized_comparator(&s) {
        eprintln!("{line}");
    }
    Ok(())
}

/// What answers for the agents under `preference.comparator_generation_mode: centralized` (an
/// iterative algorithm's comparator); `None` otherwise.
fn centralized_comparator(s: &Scenario) -> Option<String> {
    use comlrl_scenario::{ComparatorGenerationMode, ComparatorPolicy};
    let p = &s.preference;
    if !s.trainer.algorithm.iterative()
        || p.comparator_generation_mode != ComparatorGenerationMode::Centralized
    {
        return None;
    }
    let i = p.comparator_centralized_agent_index;
    let who = match p.comparator_policy {
        ComparatorPolicy::Model => match &p.comparator_model {
            Some(m) => format!("the comparator model {}", m.spec),
            None => "the comparator model".to_string(),
        },
        ComparatorPolicy::Api => "the endpoint".to_string(),
        ComparatorPolicy::History => format!(
            "agent {i}'s policy as saved {} round(s) back",
            p.comparator_history_k.unwrap_or(1)
        ),
        _ => format!("agent {i}'s policy"),
    };
    Some(format!(
        "comparator: centralized, {who} answers the tagged prompt for all {} agents with agent {i}'s sampling settings; each answer is split into their candidates",
        s.agents.len()
    ))
}

/// Each agent's first training prompt, formatted; `None` where `chat_template: auto` needs a Hub
/// model that is not cached (`comlrl run` downloads it, then checks its template).
fn first_prompts(s: &Scenario) -> anyhow::Result<Vec<Option<String>>> {
    let row = &s.dataset.train.rows[0];
    s.agents
        .iter()
        .map(|agent| {
            let src = models::model_source(agent, &s.base_dir)?;
            let dir = src.cached_dir()?;
            if agent.chat_template == ChatTemplateSpec::Auto && dir.is_none() {
                if let ModelSource::Gguf(path) = &src {
                    eprintln!(
                        "agent {}: `chat_template: auto`: the template of {} is read from its metadata when `comlrl run` loads it",
                        agent.index,
                        path.display()
                    );
                    return Ok(None);
                }
                if let ModelSource::Hub { .. } = src {
                    eprintln!(
                        "agent {}: `chat_template: auto`: {} is not in the Hub cache ({}), so its chat template is checked when `comlrl run` downloads it",
                        agent.index,
                        src.describe(),
                        comlrl::model::io::source::hub_cache_dir().display()
                    );
                    return Ok(None);
                }
            }
            let files = dir.as_deref().map_or(ModelFiles::None, ModelFiles::Dir);
            let chat = chat_template(agent, files, &src.describe())?;
            Ok(Some(PromptFormatter::new(agent, chat).render(row)?))
        })
        .collect()
}
