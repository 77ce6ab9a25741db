"""Rollout engine, agent loop and the trajectory contract."""

import math

import pytest
import torch

from sixblanks.algorithms.logprobs import process_logits, token_logprobs
from sixblanks.harness.config import ModelConfig
from sixblanks.harness.models import load_policy
from sixblanks.harness.rollout.agent import run_episodes
from sixblanks.harness.rollout.engine import HFEngine, SamplingParams
from sixblanks.harness.tasks import Instance, Task, make_task
from sixblanks.harness.tasks.verify import VerifierGate
from sixblanks.harness.training.contract import check_contract
from sixblanks.harness.training.contract import check_contract as contract_check
from tests.conftest import tiny_llama

TASKS = ["arithmetic", "guess_number", "chain_arithmetic", "reasoning_gym:basic_arithmetic"]


@pytest.fixture(scope="module")
def policies():
    cache = {}

    def get(name):
        if name not in cache:
            task = make_task(name)
            model, tok = load_policy(ModelConfig(seed=1), [task])
            cache[name] = (task, model, tok)
        return cache[name]

    return get


def _rollout(policies, name, temperature=1.0, n=4, G=4, max_new=5, **kw):
    task, model, tok = policies(name)
    engine = HFEngine(model, tok)
    params = SamplingParams(temperature=temperature, max_new_tokens=max_new, **kw)
    batch = run_episodes(
        engine,
        tok,
        task,
        task.instances(list(range(n))),
        G,
        params,
        generator=torch.Generator().manual_seed(0),
    )
    return task, model, tok, engine, batch


@pytest.mark.parametrize("name", TASKS)
def test_contract_holds_on_real_rollouts(policies, name):
    task, model, tok, engine, batch = _rollout(policies, name, temperature=0.8)
    report = check_contract(
        batch,
        model,
        tok,
        temperature=0.8,
        reward_range=task.reward_range,
        group_size=4,
        policy_version=engine.policy_version,
        env_keys=task.env_state_keys,
    )
    assert report.passed, report.summary()
    lp = next(r for r in report.results if r.name == "logprobs")
    assert lp.metrics["max_abs_diff"] <= 1e-4
    assert batch.action_tokens() > 0 and batch.size == 16
    if name == "guess_number":
        assert int(batch.n_turns.max()) > 1  # really multi-turn
        # observation tokens between turns are masked; action tokens of the k-th action carry
        # turn id k
        for b in range(batch.size):
            actions = [(s, e) for kind, s, e in batch.segments[b] if kind == "action"]
            for k, (s, e) in enumerate(actions):
                assert (
                    batch.action_mask[b, s:e].eq(1.0).all() and batch.turn_ids[b, s:e].eq(k).all()
                )
            assert batch.action_mask[b][batch.turn_ids[b] < 0].eq(0).all()


@pytest.mark.parametrize("name", TASKS)
def test_contract_names_the_culprit_of_corrupted_batches(policies, name):
    task, model, tok, _, batch = _rollout(policies, name)

    def check_contract(*args, **kw):  # with the task's notion of a state key
        return contract_check(*args, env_keys=task.env_state_keys, **kw)

    shifted = batch.clone()
    shifted.action_mask = torch.cat(
        [shifted.action_mask[:, 1:], torch.zeros(batch.size, 1)], 1
    )  # one token early
    rep = check_contract(shifted, model, tok)
    fail = {r.name: r for r in rep.failures}
    assert "masks" in fail and fail["masks"].sample == 0
    first_action = batch.segments[0][1][1]
    assert fail["masks"].token == first_action - 1  # the last prompt token is now wrongly marked
    assert f"sample 0, token {first_action - 1}" in fail["masks"].detail

    perturbed = batch.clone()
    t = int(batch.action_mask[5].nonzero()[0, 0])
    perturbed.behavior_logprobs[5, t] -= 0.05
    rep = check_contract(perturbed, model, tok)
    fail = {r.name: r for r in rep.failures}
    assert set(fail) == {"logprobs", "ratio"}
    assert (fail["logprobs"].sample, fail["logprobs"].token) == (5, t)

    misaligned = batch.clone()
    misaligned.group_ids[3], misaligned.group_ids[4] = (
        misaligned.group_ids[4].clone(),
        misaligned.group_ids[3].clone(),
    )
    rep = check_contract(misaligned, model, tok)
    assert [r.name for r in rep.failures] == ["groups"]
    assert rep.failures[0].sample in (3, 4)

    wrong_instance = batch.clone()
    wrong_instance.instance_seeds[6] = 999
    rep = check_contract(wrong_instance, model, tok, group_size=4)
    assert [r.name for r in rep.failures] == ["groups"] and rep.failures[0].sample == 6

    bad_reward = batch.clone()
    bad_reward.reward[2] = 7.0
    bad_reward.turn_rewards[2] = 0
    bad_reward.turn_rewards[2, 0] = 7.0
    rep = check_contract(bad_reward, model, tok, reward_range=(0, 1))
    assert [r.name for r in rep.failures] == ["rewards"] and rep.failures[0].sample == 2


def test_greedy_engine_matches_transformers_generate(policies):
    task, model, tok = policies("arithmetic")
    engine = HFEngine(model, tok)
    prompts = [
        [tok.bos_token_id] + tok(i.prompt, add_special_tokens=False)["input_ids"]
        for i in task.instances([0, 1, 2])
    ]
    prompts.append(prompts[0][:3])  # different length: exercises left padding
    gens = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=6))
    for p, (g,) in zip(prompts, gens):
        ref = model.generate(
            torch.tensor([p]),
            attention_mask=torch.ones(1, len(p), dtype=torch.long),
            max_new_tokens=6,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=tok.pad_token_id,
        )
        assert g.token_ids == ref[0, len(p) :].tolist()
        assert g.finish_reason == "length"


def test_sampling_distribution_top_k_top_p_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    # top-p 0.8: keep tokens until the mass before reaches 0.8 -> {0.5, 0.2, 0.15}
    z = process_logits(logits, 1.0, 0, 0.8)
    p = torch.softmax(z, -1)[0]
    assert torch.allclose(p, torch.tensor([0.5, 0.2, 0.15, 0, 0]) / 0.85, atol=1e-6)
    # top-k 2 at temperature 2: p ∝ sqrt(p)
    z = process_logits(logits, 2.0, 2, 1.0)
    p = torch.softmax(z, -1)[0]
    w = torch.tensor([0.5, 0.2]).sqrt()
    assert torch.allclose(p[:2], w / w.sum(), atol=1e-6) and p[2:].sum() == 0


def test_engine_logprobs_follow_top_p_and_stay_in_the_nucleus(policies):
    task, model, tok, _, batch = _rollout(policies, "arithmetic", temperature=1.3, top_p=0.6)
    report = check_contract(batch, model, tok, temperature=1.3, top_p=0.6)
    assert report.passed, report.summary()
    assert torch.isfinite(batch.behavior_logprobs).all()


def test_chunked_logprobs_equal_naive_including_gradients():
    torch.manual_seed(0)
    logits = torch.randn(3, 37, 50, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (3, 37))
    lp, ent = token_logprobs(logits, targets, 0.7, entropy=True, chunk=8)
    naive = torch.log_softmax(logits / 0.7, -1)
    ref_lp = naive.gather(-1, targets[..., None]).squeeze(-1)
    ref_ent = -(naive.exp() * naive).sum(-1)
    assert torch.allclose(lp.double(), ref_lp, atol=1e-5) and torch.allclose(
        ent.double(), ref_ent, atol=1e-5
    )
    w1, w2 = torch.randn(3, 37, dtype=torch.float64), torch.randn(3, 37, dtype=torch.float64)
    (g,) = torch.autograd.grad((lp.double() * w1).sum() + (ent.double() * w2).sum(), logits)
    (g_ref,) = torch.autograd.grad((ref_lp * w1).sum() + (ref_ent * w2).sum(), logits)
    assert torch.allclose(g, g_ref, atol=1e-5)


def test_truncation_and_stop(policies):
    task, model, tok, _, batch = _rollout(policies, "arithmetic", temperature=1.0, max_new=2)
    for b in range(batch.size):
        action = batch.segments[b][1]
        n = action[2] - action[1]
        ends_with_stop = batch.actions[b][0].endswith("\n")
        assert n <= 2
        assert bool(batch.truncated[b]) == (
            not ends_with_stop and n == 2 and "<eos>" not in batch.actions[b][0]
        )


class _Flaky(Task):
    name = "flaky"

    def make_instance(self, seed):
        return Instance(seed, f"{seed}=", {})

    def verify(self, instance, response):
        if instance.seed % 2:
            raise RuntimeError("scorer crashed")
        return 1.0

    def alphabet(self):
        return "0123456789="


def test_a_raising_task_fails_its_samples_only(policies):
    _, model, tok = policies("arithmetic")
    task = _Flaky()
    gate = VerifierGate(task)
    batch = run_episodes(
        HFEngine(model, tok),
        tok,
        task,
        task.instances([0, 1, 2, 3]),
        2,
        SamplingParams(max_new_tokens=3),
        gate,
        generator=torch.Generator().manual_seed(0),
    )
    assert batch.failed.tolist() == [False, False, True, True, False, False, True, True]
    assert all(
        "scorer crashed" in (r or "") for r, f in zip(batch.failure_reasons, batch.failed) if f
    )
    assert batch.action_mask[batch.failed].sum() == 0  # failed samples carry no trained tokens
    assert batch.reward[~batch.failed].eq(1.0).all()
    assert gate.stats.failures == 4 and gate.stats.calls == 8
    assert check_contract(batch, model, tok).passed


def test_version_advances_on_weight_sync(policies):
    task, model, tok = policies("arithmetic")
    engine = HFEngine(model, tok)
    v = engine.policy_version
    engine.load_weights({k: t.clone() for k, t in model.state_dict().items()})
    assert engine.policy_version == v + 1
    batch = run_episodes(
        engine,
        tok,
        task,
        task.instances([0]),
        2,
        SamplingParams(max_new_tokens=3),
        generator=torch.Generator().manual_seed(0),
    )
    assert batch.policy_version.tolist() == [v + 1] * 2
    assert not check_contract(batch, model, tok, policy_version=v).passed
    assert math.isfinite(float(batch.behavior_logprobs.sum()))


def test_a_system_prompt_without_a_chat_template_is_text_before_the_prompt(policies):
    """Raw text (no chat template): the task's system prompt and a blank line come before the
    prompt, after BOS; the contract's mask check renders observations with the task, and finds the
    mismatch when it is not told the task."""

    _, model, tok = policies("arithmetic")
    task = make_task("arithmetic", {"system_prompt": "1+1=2"})
    batch = run_episodes(
        HFEngine(model, tok),
        tok,
        task,
        task.instances([0, 1]),
        2,
        SamplingParams(max_new_tokens=3),
        generator=torch.Generator().manual_seed(0),
    )
    prompt = batch.observations[0][0]
    want = [tok.bos_token_id, *tok(f"1+1=2\n\n{prompt}", add_special_tokens=False)["input_ids"]]
    (kind, s, e) = batch.segments[0][0]
    assert kind == "obs" and batch.tokens[0, s:e].tolist() == want
    assert check_contract(batch, model, tok, task=task).passed
    report = check_contract(batch, model, tok)
    assert [r.name for r in report.failures] == ["masks"]


@pytest.mark.parametrize("kv_heads", [4, 2])  # 2: grouped-query attention (as SmolLM2)
def test_the_static_cache_decoder_gives_the_models_own_logits(kv_heads):
    """rollout.decode auto: the Llama decoder's logits after a left-padded prefill (repeated
    prompts computed once) and after each appended token equal the model's own forward over the
    whole sequence (second method: no cache, transformers' masks and positions)."""

    from sixblanks.harness.rollout.fastdecode import LlamaDecoder, supported

    model = tiny_llama(kv_heads, tie_word_embeddings=True)
    assert supported(model)
    lens = [7, 3, 5]
    L, B, new = max(lens), len(lens), 4
    ids = torch.zeros((B, L), dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    for i, n in enumerate(lens):
        ids[i, L - n :] = torch.randint(1, 50, (n,))
        attn[i, L - n :] = 1
    # two prompts repeated (as a group of samples repeats its prompt): prefilled once each
    ids, attn = torch.cat([ids, ids[:2]]), torch.cat([attn, attn[:2]])
    B = ids.shape[0]
    dec = LlamaDecoder(model, ids, attn, new)
    got = [dec.prefill()]
    steps = torch.randint(1, 50, (B, new))
    for t in range(new):
        got.append(dec.step(steps[:, t]))
    for t, logits in enumerate(got):
        want = _last_logits(model, ids, attn, steps[:, :t])
        assert torch.allclose(logits, want, atol=1e-5), (t, (logits - want).abs().max())


def _last_logits(model, ids, attn, appended):
    """The model's own last-position logits ``[B, V]`` over the left-padded prompts ``ids``
    (``attn``) followed by the tokens ``appended`` ``[B, t]``: no cache, transformers' masks."""

    B, t = appended.shape
    full = torch.cat([ids, appended], 1)
    mask = torch.cat([attn, torch.ones((B, t), dtype=torch.long)], 1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        return model(input_ids=full, attention_mask=mask, position_ids=pos).logits[:, -1]


def test_rows_that_ended_leave_the_decoders_cache_and_the_rest_keep_their_logits():
    """``drop``: once at least a quarter of the cached rows ended they leave the cache; the rows
    still going get the model's own logits (second method: transformers' forward over the whole
    sequence), the rows dropped get 0; a drop of fewer than a quarter changes nothing."""

    from sixblanks.harness.rollout.fastdecode import LlamaDecoder

    model = tiny_llama(2)
    B, L, new = 8, 5, 6
    ids = torch.randint(1, 50, (B, L))
    attn = torch.ones((B, L), dtype=torch.long)
    attn[2, :2] = 0
    steps = torch.randint(1, 50, (B, new))
    dec = LlamaDecoder(model, ids, attn, new)
    got = [dec.prefill()]
    ended = torch.zeros(B, dtype=torch.bool)
    for t in range(new):
        if t == 1:
            ended[5] = True  # one of eight: stays
            dec.drop(ended)
            assert dec.live is None
        if t == 2:
            ended[[0, 2]] = True  # three of eight: they leave
            dec.drop(ended)
            assert dec.live.tolist() == [1, 3, 4, 6, 7]
        if t == 4:
            ended[[3, 7]] = True  # two of five
            dec.drop(ended)
            assert dec.live.tolist() == [1, 4, 6]
        got.append(dec.step(steps[:, t]))
    for t, logits in enumerate(got):
        want = _last_logits(model, ids, attn, steps[:, :t])
        # got[t]: the prefill, then step t - 1 (a drop before step 2 shows from got[3] on)
        out = {3: [0, 2, 5], 4: [0, 2, 5], 5: [0, 2, 3, 5, 7], 6: [0, 2, 3, 5, 7]}.get(t, [])
        going = [r for r in range(B) if r not in out]
        assert torch.allclose(logits[going], want[going], atol=1e-5), t
        assert not logits[out].any(), t


def test_the_decoder_samples_the_same_with_and_without_padding(policies, monkeypatch):
    """rollout.skip_padding: a seeded generation whose rows end at different tokens (a stop
    string) samples the same tokens with the same log-probs (to float precision) whether the
    decoder computes every row to the longest or drops the rows that ended, and drops them."""

    from sixblanks.harness.rollout.fastdecode import LlamaDecoder

    task, model, tok = policies("arithmetic")
    prompts = [
        tok(task.make_instance(i).prompt, add_special_tokens=False)["input_ids"] for i in range(4)
    ]
    rows = []
    head = LlamaDecoder._head
    monkeypatch.setattr(LlamaDecoder, "_head", lambda self, h: rows.append(len(h)) or head(self, h))
    out, computed = {}, {}
    for skip in (False, True):
        rows.clear()
        eng = HFEngine(model, tok, skip_padding=skip)
        p = SamplingParams(temperature=1.0, max_new_tokens=24, stop=["1", "2", "3"])
        out[skip] = sum(
            eng.generate(prompts, p, n=4, generator=torch.Generator().manual_seed(3)), []
        )
        computed[skip] = list(rows)
    lengths = [len(g.token_ids) for g in out[True]]
    assert min(lengths) < max(lengths) // 2  # rows end far apart
    for ga, gb in zip(out[True], out[False]):
        assert ga.token_ids == gb.token_ids and ga.finish_reason == gb.finish_reason
        assert ga.logprobs == pytest.approx(gb.logprobs, abs=1e-5)
    # the prefill computes the 4 distinct prompts, each step the rows in the cache
    assert computed[False][0] == computed[True][0] == 4
    assert set(computed[False][1:]) == {16}
    # step j computes token j: the rows longer than j go on; the cache holds them and fewer than
    # a third as many that ended (it drops the ended ones once they are a quarter of it)
    for j, rows_in in enumerate(computed[True][1:], start=1):
        going = sum(n > j for n in lengths)
        assert going <= rows_in < 4 * going / 3, (j, going, rows_in)
    assert sum(computed[True]) < 0.8 * sum(computed[False])


def test_the_decoder_in_bfloat16_is_as_close_to_float32_as_the_models_own_bfloat16_forward():
    """A bfloat16 policy decodes (its cache and attention scores kept in float32, as SDPA
    accumulates them) with logits no further from the float32 model's than transformers' own
    bfloat16 forward is, and returns them in bfloat16."""

    import copy

    from sixblanks.harness.rollout.fastdecode import LlamaDecoder

    model32 = tiny_llama(2)
    with torch.no_grad():  # sharp attention (scores of tens), where 16-bit scores lose most
        for layer in model32.model.layers:
            layer.self_attn.q_proj.weight.mul_(6.0)
            layer.self_attn.k_proj.weight.mul_(6.0)
    model16 = copy.deepcopy(model32).to(torch.bfloat16)
    B, L, new = 3, 6, 12
    ids = torch.randint(1, 50, (B, L))
    attn = torch.ones((B, L), dtype=torch.long)
    attn[1, :2] = 0
    steps = torch.randint(1, 50, (B, new))
    dec = LlamaDecoder(model16, ids, attn, new + 1)
    got = [dec.prefill()] + [dec.step(steps[:, t]) for t in range(new)]
    full = torch.cat([ids, steps], 1)
    mask = torch.cat([attn, torch.ones((B, new), dtype=torch.long)], 1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        want = model32(input_ids=full, attention_mask=mask, position_ids=pos).logits
        hf16 = model16(input_ids=full, attention_mask=mask, position_ids=pos).logits.float()
    ours = torch.stack([g.float() for g in got], 1)  # [B, new + 1, V]
    ref, theirs = want[:, L - 1 :], hf16[:, L - 1 :]
    assert ours.dtype == torch.float32 and got[0].dtype == torch.bfloat16
    assert float((ours - ref).abs().max()) <= 1.5 * float((theirs - ref).abs().max()) + 1e-3


def test_the_decoder_samples_what_the_transformers_path_samples(policies):
    """The same seeded generation through both decode paths: the same tokens, log-probs equal to
    float precision; a LoRA policy or a reference with its adapter off takes transformers' path."""

    from sixblanks.harness.lora import AdapterOff, apply_lora
    from sixblanks.harness.rollout.fastdecode import supported

    task, model, tok = policies("arithmetic")
    prompts = [
        tok(task.make_instance(i).prompt, add_special_tokens=False)["input_ids"] for i in range(4)
    ]
    out = {}
    for decode in ("auto", "transformers"):
        eng = HFEngine(model, tok, decode=decode)
        assert eng.fast == (decode == "auto")
        p = SamplingParams(temperature=1.0, max_new_tokens=6, ignore_eos=True)
        out[decode] = eng.generate(prompts, p, n=3, generator=torch.Generator().manual_seed(5))
    for ga, gb in zip(sum(out["auto"], []), sum(out["transformers"], [])):
        assert ga.token_ids == gb.token_ids and len(ga.token_ids) == 6
        assert ga.logprobs == pytest.approx(gb.logprobs, abs=1e-5)
    import copy

    lora = apply_lora(
        copy.deepcopy(model), {"r": 2, "alpha": 4.0, "dropout": 0.0, "target_modules": "all-linear"}
    )
    assert not supported(lora) and not supported(AdapterOff(lora))


def test_the_sampler_draws_tokens_at_their_probabilities():
    """``sample_categorical`` (inversion of the cumulative distribution): over 200,000 draws
    from one row's distribution each token's frequency is within 4.5 standard errors of its
    probability (a tail of tiny probabilities included), zero-probability tokens are never drawn,
    the draws repeat from the same generator seed, and rows are drawn independently."""

    from sixblanks.harness.rollout.decoding import sample_categorical

    n = 200_000
    for V in (3, 101, 1000):
        logits = torch.randn(V, generator=torch.Generator().manual_seed(V)) * 3
        logits[:2] = float("-inf")  # filtered out (top-k / top-p)
        logp = torch.log_softmax(logits, -1)
        p = logp.double().exp()

        def draw(seed, logp=logp, chunk=25_000):  # chunks: 200,000 x 1000 float64 is 1.6 GB
            g = torch.Generator().manual_seed(seed)
            rows = logp.expand(chunk, -1)
            return torch.cat([sample_categorical(rows, g) for _ in range(n // chunk)])

        got = draw(7)
        assert bool((got >= 2).all()) and bool((got < V).all())
        freq = torch.bincount(got, minlength=V).double() / n
        se = (p * (1 - p) / n).sqrt()
        z = ((freq - p).abs() / se.clamp(min=1e-12))[2:]
        assert float(z.max()) < 4.5, (V, float(z.max()))
        assert torch.equal(got, draw(7))
    # two different rows in one call: each drawn from its own distribution
    two = torch.log_softmax(torch.tensor([[0.0, -30.0, -30.0], [-30.0, -30.0, 0.0]]), -1)
    draws = sample_categorical(two.repeat(1000, 1), torch.Generator().manual_seed(0)).view(1000, 2)
    assert bool((draws[:, 0] == 0).all()) and bool((draws[:, 1] == 2).all())


def test_fixed_length_generation_takes_every_token_as_the_stopping_path_does(policies):
    """``ignore_eos`` with no stop string skips the per-token stop bookkeeping: every sample has
    exactly max_new_tokens tokens, finish reason length, and the tokens and log-probs of the
    general path (forced by a stop set whose only stop token is past the vocabulary)."""

    task, model, tok = policies("arithmetic")
    prompts = [
        tok(task.make_instance(i).prompt, add_special_tokens=False)["input_ids"] for i in range(3)
    ]
    eng = HFEngine(model, tok)
    V = model.get_output_embeddings().weight.shape[0]
    never = torch.zeros(V + 1, dtype=torch.bool)
    never[V] = True  # no sampled token has this id
    eng._stop_cache[("\x00never\x00",)] = never
    out = {}
    for stop in ((), ("\x00never\x00",)):
        p = SamplingParams(temperature=1.0, max_new_tokens=7, ignore_eos=True, stop=stop)
        out[stop] = sum(
            eng.generate(prompts, p, n=2, generator=torch.Generator().manual_seed(2)), []
        )
    fixed, general = out[()], out[("\x00never\x00",)]
    for a, b in zip(fixed, general):
        assert len(a.token_ids) == 7 and a.finish_reason == "length"
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
