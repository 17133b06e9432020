"""One training step of verl 0.9.1's v1 trainer (its default, `trainer.use_v1: true`) up to the
advantages, through verl's own code on CPU, with MicroCoder-GRPO's pieces plugged in.

What runs is verl's: a local Ray and a TransferQueue (the v1 trainer's store), the trainer's
`_submit_batch_to_rollout`, the TQ agent-loop worker's `generate_sequences` (its n sessions per
prompt, `_agent_loop_postprocess`, `_compute_score`, `AgentLoopOutput.as_dict`'s rm_scores),
the reward-loop worker's `compute_score` calling our manager as verl's loader builds it from
the example config, the sync `ReplayBuffer.sample`, the trainer's `_balance_batch` (which
pads the batch with `upsample_batch_to_divisible_size` and reorders it) and
`_compute_advantage` (`compute_advantage_for_multi_trajectories`, then our estimator), the
advantages read back from the TransferQueue. What stands in: the LLM (an agent loop that
returns this file's responses), the tokenizer (characters), and the Ray worker groups (the
methods are called on their objects directly, without their model-loading constructors).

Needs verl and TransferQueue: `bash scripts/test_verl.sh` installs both; elsewhere this skips.
"""

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl 0.9.1 is not installed here: run `bash scripts/test_verl.sh`")
pytest.importorskip("transfer_queue", reason="TransferQueue (verl's v1 store) is not installed: "
                                             "run `bash scripts/test_verl.sh`")

import ray  # noqa: E402
import transfer_queue as tq  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, register  # noqa: E402
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker  # noqa: E402
from verl.trainer.ppo.reward import load_reward_manager  # noqa: E402
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer  # noqa: E402
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from microcoder.integrations.verl import reward  # noqa: E402
from microcoder.integrations.verl.advantage import reset_mask_generators  # noqa: E402
from microcoder.integrations.verl.data import verl_row  # noqa: E402
from tests.test_integrations_verl_estimator import example_config, trainer_reference  # noqa: E402
from tests.test_integrations_verl_reward import (  # noqa: E402
    CORRECT, LIMIT, REPETITION_M, SAMPLES, SUM_PROBLEM, WRONG, CharTokenizer, tokens)

BY_NAME = {sample[0]: sample for sample in SAMPLES}
# Each prompt's sessions share its problem here, as in verl (GROUPS mixes in a broken problem).
V1_GROUPS = [["correct", "wrong", "cut_in_code", "correct_then_cut"],
             ["wrong_then_cut", "loop", "cut_in_code", "correct"]]
G = len(V1_GROUPS[0])
PROMPT_IDS = [11, 12, 13]

# What the stand-in LLM answers: prompt (its extra_info index) -> one list of outputs per session.
ANSWERS: dict[int, list[list[list[int]]]] = {}


@register("microcoder_canned")
class CannedAgentLoop:
    """An agent loop that answers from ANSWERS instead of asking an LLM (verl instantiates it
    with hydra and calls `run(sampling_params, **dataset_row, session_id=...)`)."""

    def __init__(self, **_):
        pass

    async def run(self, sampling_params, **row):
        outputs = [AgentLoopOutput(prompt_ids=PROMPT_IDS, response_ids=ids, response_mask=[1] * len(ids),
                                   num_turns=2, metrics=AgentLoopMetrics())
                   for ids in ANSWERS[int(row["index"])][int(row["session_id"])]]
        return outputs if len(outputs) > 1 else outputs[0]


@pytest.fixture(scope="module")
def problems_file(tmp_path_factory):
    """The problems JSONL the rows refer to (by id and sha256, the converter's default)."""
    path = tmp_path_factory.mktemp("v1") / "problems.jsonl"
    path.write_text(SUM_PROBLEM.model_dump_json() + "\n")
    return str(path)


@pytest.fixture(scope="module")
def transfer_queue():
    """A local Ray (2 CPUs, no dashboard) and a TransferQueue with one storage unit, for the module."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        yield
    finally:
        tq.close()
        ray.shutdown()
        reward.close_shared_evaluator()


def v1_config(problems_file):
    """The example config at this file's sizes: 2 prompts x G = 4 responses, mini-batches of 3
    prompts, so verl pads 8 responses to lcm(2 data-parallel ranks, 3 x 4) = 12."""
    return example_config(
        f"reward.custom_reward_function.reward_kwargs.problems_files=['{problems_file}']",
        f"data.max_response_length={LIMIT}", "data.train_batch_size=2", f"actor_rollout_ref.rollout.n={G}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=3",
        "actor_rollout_ref.rollout.agent.default_agent_loop=microcoder_canned",
        "reward.custom_reward_function.reward_kwargs.evaluator_workers=2",
        f"reward.custom_reward_function.reward_kwargs.repetition_m={REPETITION_M}",
        "algorithm.microcoder.rho=0.5", "algorithm.microcoder.seed=5")


def objects(values):
    """A 1-D numpy object array (verl's collate_fn's non-tensor columns), even of lists."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


class Stand:
    """The v1 pieces wired as verl's TaskRunnerV1 wires them, minus the model and the Ray actors."""

    def __init__(self, config):
        manager = load_reward_manager(config, CharTokenizer())
        self.loop = manager.loop  # verl's reward worker runs the manager on its own event loop
        reward_worker = RewardLoopWorker.__new__(RewardLoopWorker)
        reward_worker.config, reward_worker.reward_manager, reward_worker.loop = config, manager, self.loop
        # a Ray actor handle's `.remote(...)`, awaited by the agent loop
        reward_handle = SimpleNamespace(compute_score=SimpleNamespace(remote=reward_worker.compute_score))

        worker_class = AgentLoopWorkerTQ.__ray_metadata__.modified_class  # the class under verl's @ray.remote
        agent = worker_class.__new__(worker_class)
        agent.config, agent.tokenizer, agent.processor = config, CharTokenizer(), None
        agent.reward_loop_worker_handles, agent.distillation_enabled = [reward_handle], False
        agent.llm_client, agent.hf_model_type, agent.dataset_cls, agent.tools = None, None, None, []
        agent.mm_processor_kwargs, agent.background_tasks = {}, set()
        self.agent = agent

        trainer = PPOTrainerSync.__new__(PPOTrainerSync)
        trainer.config, trainer.tokenizer, trainer.trainer_mode = config, CharTokenizer(), "sync"
        trainer.global_steps, trainer.use_critic = 1, False
        trainer.actor_rollout_wg = SimpleNamespace(_dispatch_info={"actor": [0, 1]})  # 2 data-parallel ranks
        trainer.agent_loop_manager = SimpleNamespace(generate_sequences=self.generate)
        self.trainer = trainer
        self.replay_buffer = ReplayBuffer(trainer_mode="sync", trainer_config=config.trainer,
                                          max_off_policy_threshold=None, max_off_policy_strategy="drop",
                                          sampler_kwargs={})

    def generate(self, batch):
        async def rollout():
            await self.agent.generate_sequences(batch)
            await asyncio.gather(*list(self.agent.background_tasks))
        self.loop.run_until_complete(rollout())

    def step(self, problems):
        """One step up to the advantages: (the batch's keys, its advantages (B, L), its response mask (B, L))."""
        # the dataset's rows (our converter's) as the trainer's dataloader batches them
        rows = [verl_row(problem, index, "train") for index, problem in enumerate(problems)]
        columns = {key: [row[key] for row in rows] for key in ("data_source", "reward_model", "extra_info", "ability")}
        columns["raw_prompt"] = [row["prompt"] for row in rows]
        columns["index"] = [row["extra_info"]["index"] for row in rows]
        columns["uid"] = [f"prompt{index}" for index in range(len(rows))]
        batch = tu.get_tensordict({key: objects(values) for key, values in columns.items()})
        tu.assign_non_tensor_data(batch, "global_steps", 1)
        self.trainer._submit_batch_to_rollout(batch)
        sampled, _ = self.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=len(rows))
        balanced = self.trainer._balance_batch(sampled, metrics={})
        done = self.trainer._compute_advantage(balanced, metrics={})
        out = tq.kv_batch_get(keys=done.keys, partition_id="train", select_fields=["advantages", "response_mask"])
        tq.kv_clear(keys=done.keys, partition_id="train")
        out = out.to_padded_tensor()  # as the trainer pads them, with zeros
        return list(done.keys), out["advantages"], out["response_mask"]


def test_a_v1_step_pads_and_gives_our_trainers_advantages(transfer_queue, problems_file):
    """2 prompts x 4 sessions: verl pads the 8 responses to 12 and reorders them; the padding
    gets 0 and the rest our TRL trainer's advantages, with the mask's draws in verl's row order."""
    ANSWERS.clear()
    expected_facts = {}
    for index, names in enumerate(V1_GROUPS):
        ANSWERS[index] = [[tokens(*BY_NAME[name][2:4])] for name in names]
        for session, name in enumerate(names):
            expected_facts[f"prompt{index}_{session}_0"] = {"uid": f"prompt{index}", "verdict": BY_NAME[name][4],
                                                            "ids": tokens(*BY_NAME[name][2:4])}
    reset_mask_generators()
    keys, advantages, mask = Stand(v1_config(problems_file)).step([SUM_PROBLEM] * len(V1_GROUPS))
    assert len(keys) == 12 and sum(key.startswith("pad") for key in keys) == 4  # verl padded 8 to 12
    real = [position for position, key in enumerate(keys) if not key.startswith("pad")]
    padding = [position for position, key in enumerate(keys) if key.startswith("pad")]
    assert sorted(keys[position] for position in real) == sorted(expected_facts)
    assert torch.equal(advantages[padding], torch.zeros_like(advantages[padding]))
    expected = trainer_reference([expected_facts[keys[position]] for position in real], 0.5,
                                 torch.Generator().manual_seed(5))
    torch.testing.assert_close(advantages[real], expected.unsqueeze(-1) * mask[real], atol=1e-6, rtol=0)
    assert (advantages[real, 0] != 0).any()


def test_a_session_of_several_outputs_is_refused_in_a_v1_step(transfer_queue, problems_file):
    """An agent loop that returns an output per turn: verl hands each output to the estimator
    as a response of its own, and the estimator refuses the batch, saying why."""
    ANSWERS.clear()
    ANSWERS[0] = [[tokens(WRONG, False)], [tokens(WRONG, False), tokens(CORRECT, False)],
                  [tokens(CORRECT, False)], [tokens(WRONG, False)]]  # the second session: two turns
    with pytest.raises(ValueError, match="several outputs"):
        Stand(v1_config(problems_file)).step([SUM_PROBLEM])
