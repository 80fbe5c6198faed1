"""The 2017 REINFORCE search: determinism by seed, the placement log and its replay."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cluster.simulated import SimulatedEnvironment
from placer.features import group_features
from placer.reinforce import ReinforceConfig, ReinforceLearner
from placer.search import run_search
from placer.seq2seq import Seq2SeqPlacer


def rl_search(env, config, log_path=None):
    """The 2017 search of ``env``'s groups (:func:`placer.search.run_search`), an existing log replayed."""
    return run_search(ReinforceLearner(env, config), env, log_path=log_path, resume=True)


@pytest.fixture(scope="module")
def env(rnnlm_small, k80x2):
    return SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, k80x2)


def test_features_shapes(rnnlm_small):
    f = group_features(rnnlm_small.graph, rnnlm_small.grouping)
    g = rnnlm_small.grouping.num_groups
    assert f.type_counts.shape == (g, len(f.type_names))
    assert np.allclose(f.type_counts.sum(axis=1), 1.0)
    assert f.output_shapes.shape == (g, 24) and f.output_shapes.dtype == np.float32
    assert f.adjacency.shape == (g, g) and (f.adjacency == f.adjacency.T).all()
    assert f.adjacency.diagonal().sum() == 0


def test_policy_scores_its_own_samples(rnnlm_small):
    import torch

    f = group_features(rnnlm_small.graph, rnnlm_small.grouping)
    torch.manual_seed(0)
    policy = Seq2SeqPlacer(f, 3, hidden_size=32)
    gen = torch.Generator().manual_seed(1)
    actions, logp, _ = policy(4, generator=gen)
    assert actions.shape == (4, f.num_groups) and actions.max() < 3
    _, logp2, _ = policy(4, actions=actions)
    assert torch.allclose(logp, logp2)
    assert (logp < 0).all()


def test_same_seed_same_placements(env, tmp_path):
    cfg = ReinforceConfig(budget=24, k=8, seed=3, hidden_size=32)
    a = rl_search(env, cfg)
    b = rl_search(env, cfg)
    c = rl_search(env, cfg.model_copy(update={"seed": 4}))
    assert a.step_times == b.step_times
    assert (a.best_placement == b.best_placement).all()
    assert a.step_times != c.step_times
    assert len(a.step_times) == 24 and len(a.curve) == 3
    assert a.curve[-1]["placements"] == 24
    assert a.best_step_time_s == min(a.step_times)


def test_every_placement_is_logged_and_replayed(env, tmp_path):
    cfg = ReinforceConfig(budget=16, k=4, seed=0, hidden_size=32)
    log = tmp_path / "search.jsonl"
    first = rl_search(env, cfg, log_path=log)
    lines = log.read_text().splitlines()
    assert json.loads(lines[0])["search"]["seed"] == 0
    records = [json.loads(x) for x in lines[1:]]
    assert [r["index"] for r in records] == list(range(16))
    assert [r["step_time_s"] for r in records] == first.step_times

    # an interrupted search: keep 6 samples (and a torn line); the re-run replays them, then measures on
    log.write_text("\n".join(lines[:7]) + '\n{"index": 6, "plac')
    calls = []
    real_measure = env.measure

    class Counting:
        kind, spec, graph, grouping, simulator = env.kind, env.spec, env.graph, env.grouping, env.simulator

        def measure(self, p):
            calls.append(1)
            return real_measure(p)

    resumed = rl_search(Counting(), cfg, log_path=log)
    assert resumed.step_times == first.step_times
    assert len(calls) == 10
    # the torn tail was dropped, so the log is whole again: a second resume measures nothing
    assert [json.loads(x)["index"] for x in log.read_text().splitlines()[1:]] == list(range(16))
    calls.clear()
    assert rl_search(Counting(), cfg, log_path=log).step_times == first.step_times
    assert calls == []


def test_log_with_other_settings_is_refused(env, tmp_path):
    log = tmp_path / "search.jsonl"
    rl_search(env, ReinforceConfig(budget=4, k=4, seed=0, hidden_size=32), log_path=log)
    with pytest.raises(ValueError, match="other settings"):
        rl_search(env, ReinforceConfig(budget=4, k=4, seed=1, hidden_size=32), log_path=log)


def test_oom_gets_the_failing_signal(rnnlm_small):
    from cluster.spec import ClusterSpec

    tiny = dict(peak_flops=1e12, memory_bandwidth=1e11, memory_bytes=1e3)
    spec = ClusterSpec(name="tiny", devices=[dict(name="/cpu:0", kind="cpu", **tiny), dict(name="/gpu:0", kind="gpu", **tiny)],
                       default_link=dict(bandwidth=1e10))
    env = SimulatedEnvironment(rnnlm_small.graph, rnnlm_small.grouping, spec)
    res = rl_search(env, ReinforceConfig(budget=8, k=4, seed=0, hidden_size=16, failing_signal=5.0))
    assert res.step_times == [None] * 8
    assert res.best_placement is None and res.failing_signal == 5.0
    assert all(p["sample_mean_step_time_s"] is None for p in res.curve)


def test_ppo_option_is_deterministic_and_changes_the_updates(env):
    base = dict(budget=30, k=10, seed=0, hidden_size=32, learning_rate=0.003)
    faithful = rl_search(env, ReinforceConfig(**base))
    ppo_cfg = ReinforceConfig(**base, ppo_epochs=4, entropy_coef=0.01, grad_clip=1.0, normalize_advantage=True)
    a, b = rl_search(env, ppo_cfg), rl_search(env, ppo_cfg)
    assert a.step_times == b.step_times
    # the first batch is sampled before any update, so it is the same; later batches differ
    assert a.step_times[:10] == faithful.step_times[:10]
    assert a.step_times[10:] != faithful.step_times[10:]


def test_fused_attention_scores_equal_the_plain_formula_and_gradients(rnnlm_small):
    """The recomputing attention node gives the scores, log-probabilities and gradients of
    the plain ``attn_v(tanh(keys + attn_dec(dec)))`` formula (2017 Sec. 3.2's attention)."""
    import torch

    import placer.attention as attention
    from placer.attention import additive_scores

    torch.manual_seed(0)
    keys, query, v = torch.randn(61, 16, requires_grad=True), torch.randn(5, 16, requires_grad=True), torch.randn(16, requires_grad=True)
    fused = additive_scores(keys.unsqueeze(0), query.unsqueeze(0), v)[0]
    plain = (torch.tanh(keys.unsqueeze(0) + query.unsqueeze(1)) * v).sum(2)
    w = torch.randn(5, 61)
    g1 = torch.autograd.grad((fused * w).sum(), (keys, query, v))
    g2 = torch.autograd.grad((plain * w).sum(), (keys, query, v))
    assert torch.allclose(fused, plain, atol=1e-5)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, atol=1e-5)

    # the chunked blocks give the same scores and gradients as one block
    old = attention.CHUNK_ELEMENTS
    attention.CHUNK_ELEMENTS = 61 * 16 * 2  # two query rows a block
    try:
        chunked = additive_scores(keys.unsqueeze(0), query.unsqueeze(0), v)[0]
        g3 = torch.autograd.grad((chunked * w).sum(), (keys, query, v))
        # several memories, blocks over memories (one query each) and over queries
        kb, qb = torch.randn(3, 61, 16, requires_grad=True), torch.randn(3, 1, 16, requires_grad=True)
        for qq in (qb, torch.randn(3, 5, 16, requires_grad=True)):
            got = additive_scores(kb, qq, v)
            ref = (torch.tanh(kb.unsqueeze(1) + qq.unsqueeze(2)) * v).sum(3)
            wb = torch.randn(ref.shape)
            assert torch.allclose(got, ref, atol=1e-5)
            for a, b in zip(torch.autograd.grad((got * wb).sum(), (kb, qq, v)), torch.autograd.grad((ref * wb).sum(), (kb, qq, v))):
                assert torch.allclose(a, b, atol=1e-4)
    finally:
        attention.CHUNK_ELEMENTS = old
    assert torch.allclose(chunked, fused, atol=1e-6)
    for a, b in zip(g3, g1):
        assert torch.allclose(a, b, atol=1e-5)
    # without autograd (sampling) the same scores to the bit, and given values are returned as they are
    with torch.no_grad():
        assert torch.equal(additive_scores(keys.unsqueeze(0), query.unsqueeze(0), v)[0], fused.detach())
        assert torch.equal(additive_scores(keys.unsqueeze(0), query.unsqueeze(0), v, values=fused.unsqueeze(0))[0], fused)
    # a decoder's sampling loop: the keys doubled once, the same scores to the bit, step after step
    fixed = attention.FixedKeys(keys.unsqueeze(0), v)
    with torch.no_grad():
        for i in range(2):
            step = query[i:i + 2].unsqueeze(0)
            assert torch.equal(fixed.scores(step), additive_scores(keys.unsqueeze(0), step, v))
    # keys with other strides (a transposed tensor) and no queries at all: the same gradients as the plain formula
    kt = torch.randn(16, 61).t().requires_grad_()  # [61, 16], strides (1, 61)
    got = additive_scores(kt.unsqueeze(0), query.unsqueeze(0), v)[0]
    ref = (torch.tanh(kt.unsqueeze(0) + query.unsqueeze(1)) * v).sum(2)
    for a, b in zip(torch.autograd.grad((got * w).sum(), (kt, v)), torch.autograd.grad((ref * w).sum(), (kt, v))):
        assert torch.allclose(a, b, atol=1e-5)
    none = additive_scores(keys.unsqueeze(0), query[:0].unsqueeze(0), v)
    assert none.shape == (1, 0, 61) and torch.equal(torch.autograd.grad(none.sum(), keys, allow_unused=True)[0], torch.zeros(61, 16))
    with pytest.raises(ValueError, match="FixedKeys.scores: keys \\(1, 61, 16\\), query \\(5, 16\\)"):
        fixed.scores(query)


def _plain_step_by_step(policy, batch, generator=None, actions=None):
    """2017 Sec. 3.2's decoder written the plain way (one autograd graph over every step,
    tanh attention): the reference the fast policy (no-autograd sampling, then one
    teacher-forced scoring pass) must equal in samples, log-probabilities and gradients."""
    import torch

    enc = policy.encode()
    g, h = enc.shape
    keys = policy.attn_enc(enc)
    d = policy.decoder
    hx, cx = enc.new_zeros(batch, h), enc.new_zeros(batch, h)
    prev = torch.full((batch,), policy.num_devices, dtype=torch.long)
    chosen, logps, ents = [], [], []
    for i in range(g):
        x = torch.cat([policy.device_embedding(prev), enc[i].expand(batch, h)], dim=1)
        hx, cx = torch.lstm_cell(x, (hx, cx), d.weight_ih_l0, d.weight_hh_l0, d.bias_ih_l0, d.bias_hh_l0)
        scores = policy.attn_v(torch.tanh(keys.unsqueeze(0) + policy.attn_dec(hx).unsqueeze(1))).squeeze(2)
        context = torch.softmax(scores, dim=1) @ enc
        logp = torch.log_softmax(policy.out(torch.cat([hx, context], dim=1)), dim=1)
        a = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(1) if actions is None else actions[:, i]
        chosen.append(a)
        logps.append(logp.gather(1, a.unsqueeze(1)).squeeze(1))
        ents.append(-(logp.exp() * logp).sum(1))
        prev = a
    return torch.stack(chosen, 1), torch.stack(logps, 1).sum(1), torch.stack(ents, 1).sum(1)


@pytest.mark.parametrize("attention_size", [None, 8])
def test_fast_policy_equals_the_plain_step_by_step_policy(rnnlm_small, attention_size):
    """Same distribution, same updates: the fast sampling and scoring of :class:`Seq2SeqPlacer`
    draw the same placements from the same generator as the plain step-by-step decoder, and
    give the same log-probabilities, entropies and REINFORCE gradients."""
    import torch

    f = group_features(rnnlm_small.graph, rnnlm_small.grouping)
    torch.manual_seed(0)
    policy = Seq2SeqPlacer(f, 3, hidden_size=32, attention_size=attention_size)
    actions, logp, ent = policy(4, generator=torch.Generator().manual_seed(1))
    ref_actions, ref_logp, ref_ent = _plain_step_by_step(policy, 4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(actions, ref_actions)
    assert torch.allclose(logp, ref_logp, atol=1e-4) and torch.allclose(ent, ref_ent, atol=1e-4)
    params = list(policy.parameters())
    grads = torch.autograd.grad((logp * torch.tensor([1.0, -2.0, 0.5, 3.0])).sum(), params)
    _, ref_logp2, _ = _plain_step_by_step(policy, 4, actions=actions)
    ref_grads = torch.autograd.grad((ref_logp2 * torch.tensor([1.0, -2.0, 0.5, 3.0])).sum(), params)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-3)


def test_policy_loads_a_checkpoint_whose_decoder_was_an_lstm_cell(rnnlm_small):
    """Checkpoints written before the decoder became one ``nn.LSTM`` (``decoder.weight_ih`` ...) still load."""
    import torch

    f = group_features(rnnlm_small.graph, rnnlm_small.grouping)
    torch.manual_seed(0)
    saved = Seq2SeqPlacer(f, 3, hidden_size=16).state_dict()
    old = {k.removesuffix("_l0") if k.startswith("decoder.") else k: v for k, v in saved.items()}
    assert "decoder.weight_ih" in old
    torch.manual_seed(1)
    policy = Seq2SeqPlacer(f, 3, hidden_size=16)
    policy.load_state_dict(old)
    assert all(torch.equal(policy.state_dict()[k], v) for k, v in saved.items())
