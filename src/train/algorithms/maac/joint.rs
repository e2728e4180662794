//! What MAAC's one critic reads (CoMLRL's `MAACTrainer._build_critic_input`): the agents'
//! prompts joined as `[Agent 0] <prompt 0>\n\n[Agent 1] <prompt 1>…`, and for a Q critic the
//! joint action after them, `\n\n[Joint Action]\n\n[Agent 0 action]\n<completion 0>\n\n…`,
//! tokenized by agent 0's tokenizer (no chat template of its own) and valued at its last
//! token.
use crate::error::{Error, Result};
use crate::model::{Policy, Tokenizer};
use crate::train::rollout::NodeSample;

/// The critic's text for the agents' `prompts` and, for a Q critic, their `actions`.
pub fn critic_text<S: AsRef<str>>(prompts: &[S], actions: Option<&[S]>) -> String {
    let base = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| format!("[Agent {i}] {}", p.as_ref()))
        .collect::<Vec<_>>()
        .join("\n\n");
    let Some(actions) = actions else {
        return base;
    };
    let mut lines = vec!["[Joint Action]".to_string()];
    lines.extend(
        actions
            .iter()
            .enumerate()
            .map(|(i, a)| format!("[Agent {i} action]\n{}", a.as_ref())),
    );
    format!("{base}\n\n{}", lines.join("\n\n"))
}

/// The critic's token ids of every buffered joint action, node by node and within a node by
/// generation (`k` per node; the g-th completions of the agents form joint action g). A
/// prompt's text is its token ids decoded by its agent's tokenizer, special tokens kept (the
/// prompt as the agent read it: with a chat template, its markup too); a completion's is its
/// decoded text as the reward read it. `q`: the joint action follows the prompts; `v`: every
/// generation of a node shares the node's text. `agents[i]` is agent i's policy; the ids are
/// agent 0's tokenizer's, and must fit the critic's `max_positions`.
pub fn joint_ids(
    buffer: &[NodeSample],
    agents: &[&Policy],
    k: usize,
    q: bool,
    max_positions: usize,
) -> Result<Vec<Vec<u32>>> {
    let tok = &agents
        .first()
        .ok_or_else(|| Error::Internal("maac with no agents".into()))?
        .tokenizer;
    let prompts = agents
        .iter()
        .enumerate()
        .map(|(i, p)| decoded_prompts(buffer, i, p))
        .collect::<Result<Vec<_>>>()?;
    joint_ids_of(buffer, &prompts, tok, k, q, max_positions)
}

/// Agent `i`'s prompt of each buffered node as the critic's text shows it: its token ids
/// decoded by the agent's tokenizer, special tokens kept. Under MPI each rank decodes its
/// agents' and the critic's rank receives them (`world::agent_values`).
pub fn decoded_prompts(buffer: &[NodeSample], i: usize, agent: &Policy) -> Result<Vec<String>> {
    buffer
        .iter()
        .map(|node| {
            let a = node.agents.get(i).ok_or_else(|| {
                Error::Internal(format!("a buffered node has no rollout of agent {i}"))
            })?;
            Ok(agent.tokenizer.decode(&a.prompt_ids, false)?)
        })
        .collect()
}

/// [`joint_ids`] from every agent's decoded prompts (`prompts[i][n]`: agent i's of node n,
/// [`decoded_prompts`]) and agent 0's tokenizer `tok`.
pub fn joint_ids_of(
    buffer: &[NodeSample],
    prompts: &[Vec<String>],
    tok: &Tokenizer,
    k: usize,
    q: bool,
    max_positions: usize,
) -> Result<Vec<Vec<u32>>> {
    let mut out = Vec::with_capacity(buffer.len() * k);
    for (n, node) in buffer.iter().enumerate() {
        if node.agents.len() != prompts.len() {
            return Err(Error::Internal(format!(
                "a buffered node has {} agents' rollouts, the round {}",
                node.agents.len(),
                prompts.len()
            )));
        }
        let prompts = prompts
            .iter()
            .map(|p| {
                p.get(n).cloned().ok_or_else(|| {
                    Error::Internal(format!("no decoded prompt of buffered node {}", n + 1))
                })
            })
            .collect::<Result<Vec<String>>>()?;
        let mut shared: Option<Vec<u32>> = None;
        for g in 0..k {
            let ids = match (q, &shared) {
                (false, Some(ids)) => ids.clone(),
                _ => {
                    let actions = match q {
                        true => Some(
                            node.agents
                                .iter()
                                .map(|a| a.texts.get(g).cloned())
                                .collect::<Option<Vec<String>>>()
                                .ok_or_else(|| {
                                    Error::Internal(format!(
                                        "a buffered node has fewer than {k} completions"
                                    ))
                                })?,
                        ),
                        false => None,
                    };
                    let ids = tok.encode(&critic_text(&prompts, actions.as_deref()))?;
                    if ids.is_empty() || ids.len() > max_positions {
                        return Err(Error::Config(format!(
                            "the maac critic's joint text of buffered prompt {} is {} tokens, \
                             and the critic reads 1 to {max_positions}; shorten the prompts \
                             (or, with `trainer.critic.type: q`, `max_new_tokens`)",
                            n + 1,
                            ids.len()
                        )));
                    }
                    shared = Some(ids.clone());
                    ids
                }
            };
            out.push(ids);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::critic_text;

    #[test]
    fn joins_the_prompts_and_the_joint_action_as_comlrl() {
        let p = ["Write a title.", "Write a story."];
        assert_eq!(
            critic_text(&p, None),
            "[Agent 0] Write a title.\n\n[Agent 1] Write a story."
        );
        let a = ["Dawn", "Once upon a time."];
        assert_eq!(
            critic_text(&p, Some(&a)),
            "[Agent 0] Write a title.\n\n[Agent 1] Write a story.\n\n[Joint Action]\n\n\
             [Agent 0 action]\nDawn\n\n[Agent 1 action]\nOnce upon a time."
        );
    }
}
