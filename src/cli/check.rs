//! `comlrl check`: validate a scenario (syntax, values, files, reward scripts and plugins, model
//! references) without training, and print the resolved scenario.
use super::scenario_args::ScenarioArgs;
use comlrl::train::setup;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Print the resolved scenario (every default filled in) as YAML.
    #[arg(long)]
    pub print: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let s = a.scenario.load()?;
    let stack = setup::reward_stack(&s)?;
    setup::transition(&s)?;
    for agent in &s.agents {
        let src = setup::model_source(agent, &s.base_dir)?;
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
            let (content, mut f) = comlrl::model::gguf::read::read_header(path)?;
            comlrl::model::gguf::read::describe(path, &content, &mut f)
                .map_err(|e| anyhow::anyhow!("agent {}: {e}", agent.index))?;
        }
    }
    if a.print {
        print!("{}", s.to_yaml());
    }
    eprintln!(
        "{}: ok — {} agents, {} training prompts, {} epochs, K = {}, rewards: {}",
        a.scenario.scenario.display(),
        s.agents.len(),
        s.dataset.train.rows.len(),
        s.trainer.num_train_epochs,
        s.trainer.num_generations,
        stack.component_names().join(", ")
    );
    Ok(())
}
