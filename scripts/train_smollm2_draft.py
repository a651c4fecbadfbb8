#!/usr/bin/env python3
"""Train a small draft model for SmolLM2-135M-Instruct and export it as GGUF for specdec.

usage (repository root; PY=out/venv/bin/python, see scripts/ref_smollm2.py for the env):

    nice $PY scripts/train_smollm2_draft.py data  --split train --minutes 14   # teacher data
    nice $PY scripts/train_smollm2_draft.py data  --split val   --rows 64       # held-out
    nice $PY scripts/train_smollm2_draft.py train --minutes 30                  # draft
    $PY scripts/train_smollm2_draft.py export      # F32 GGUF + `specdec quantize ... q8_0`
    $PY scripts/train_smollm2_draft.py eval        # val KL / NLL / top-1 agreement

Work directory out/train_smollm2/ (git-ignored): teacher shards data-*.npz, val-*.npz,
text.npy (tokenized TinyStories), draft.pt, smollm2-draft-f32.gguf. The Q8_0 result goes
to models/smollm2-draft-q8_0.gguf.

Architecture (the draft): llama, exactly as specdec / ggml and scripts/ref_smollm2.py run it:
dim 128, 4 layers, 4 query heads of 32, 2 KV heads (GQA), SwiGLU FFN 384, RMSNorm eps 1e-5,
RoPE on adjacent pairs (ggml mode 0) with base 10000, context_length 8192 written to the
file, tied embeddings (token_embd 49152 x 128 is input table and output head). Tokenizer:
SmolLM2's own; every tokenizer.* key (and the chat template) is copied from the SmolLM2
GGUF so that specdec's draft/target vocabulary check passes. Q8_0 file ~ 8 MB (target 98 MB).

Initialisation: SmolLM2's logits are h @ E^T with E = token_embd [49152, 576]. The draft's
embedding starts as E @ V, V [576, 128] = the top-128 right singular vectors of E (PCA of
the embedding rows), so h_d @ (E V)^T approximates the teacher logits whenever the draft's
final hidden h_d approximates h_T @ V. The draft's final norm weight starts at the per-
component RMS of h_T @ V measured on teacher hidden states. The embedding is frozen for
the first --freeze fraction of the training time, then trained with a lower LR.

Data:
  (a) teacher data: SmolLM2 (float reference, scripts/ref_smollm2.py) generates batched,
      left-padded continuations with a KV cache, half greedy and half sampled at temp 0.7,
      of TinyStories story openings (first 3..25 words of a story; val.txt openings for the
      held-out split) and of ChatML prompts (chat_prompt(): simple questions, story requests,
      rewrite/summarise-this-story requests built from TinyStories text). At every generated
      position the teacher's top-64 logits and logsumexp are stored (the full 49152-way row
      would be 196 KB/position). The benchmark prompt files scripts/prompts/*.txt are not
      used for training.
  (b) real TinyStories text (train_00..02), tokenized with the SmolLM2 tokenizer, for plain
      next-token cross-entropy (cheap: no teacher).

Loss: on teacher positions, forward KL(p_T || q_d) at temperature 1 over the stored top-64
with the remaining teacher mass assigned to the draft's remaining mass (a 65-way coarsening
of the full KL; constant terms dropped), plus 0.5 x cross-entropy on the teacher's argmax
(the greedy choice, for acceptance at temp 0); on the prompt positions and on TinyStories
text, cross-entropy on the next real token (weight --ce-weight). Forward KL / white-box
distillation on teacher-generated data follows DistillSpec (Zhou et al. 2023, "DistillSpec:
Improving Speculative Decoding via Knowledge Distillation", arXiv:2310.08461), which finds
on-policy (model-generated) data and a KL objective best for the acceptance rate, and
Leviathan et al. 2023 for why acceptance = 1 - TV(p_T, q_d) at temperature > 0.
"""
import argparse
import glob
import math
import os
import random
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import ref_smollm2 as R  # noqa: E402

import numpy as np  # noqa: E402

TARGET = R.DEFAULT_MODEL
WORK = os.path.join(ROOT, "out", "train_smollm2")
TS = os.path.join(ROOT, "..", "shared", "data", "tinystories")
TOPK = 64
DRAFT_CFG = dict(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, hidden_dim=384, vocab_size=49152,
                 ctx=8192, eps=1e-5, rope_base=10000.0, tied=True)


# ---------------------------------------------------------------- prompts

CHAT_SUBJECTS = ["a dog", "a cat", "a rabbit", "a dragon", "a little girl", "a boy", "a robot",
                 "a tree", "the ocean", "a bird", "a princess", "a frog", "a teddy bear",
                 "a school", "a garden", "a train", "a fox", "a bear", "a snowman", "the stars"]
CHAT_TEMPLATES = ["Tell me a short story about %s.", "Write a story for kids about %s.",
                  "Can you write a poem about %s?", "What do you know about %s?",
                  "Describe %s in three sentences.", "Give me a fun fact about %s.",
                  "Write a bedtime story about %s who learns to share.",
                  "What is a good name for %s?", "Why do children like %s?",
                  "Explain to a child what %s is."]
CHAT_QUESTIONS = ["What is the capital of Italy?", "How does the sun make light?",
                  "Why is grass green?", "How many days are in a week?",
                  "What is two plus three?", "Why do cats purr?", "How do fish breathe?",
                  "What is the biggest animal in the world?", "What makes a rainbow?",
                  "How can I be a good friend?", "What should I eat for breakfast?",
                  "Why do leaves fall in autumn?", "How do airplanes fly?",
                  "What is water made of?", "Why do we have seasons?",
                  "Can you help me write a thank you note?", "What are the colors of the rainbow?",
                  "How do I tie my shoes?", "What is a noun?", "Give me three tips for studying."]
REWRITE = ["Rewrite this story in simpler words. Story: %s",
           "Summarise this story in two sentences. Story: %s",
           "Fix any mistakes in this text: %s",
           "Continue this story: %s", "What is the moral of this story? %s",
           "Give this story a title. Story: %s"]


def story_openings(stories, rng, n):
    out = []
    for _ in range(n):
        s = rng.choice(stories).replace("\n", " ").split()
        k = rng.randint(3, 25)
        out.append(" ".join(s[:k]))
    return out


def chat_prompts(stories, rng, n):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.35:
            u = rng.choice(CHAT_TEMPLATES) % rng.choice(CHAT_SUBJECTS)
        elif r < 0.6:
            u = rng.choice(CHAT_QUESTIONS)
        else:
            s = " ".join(rng.choice(stories).replace("\n", " ").split()[:rng.randint(20, 80)])
            u = rng.choice(REWRITE) % s
        out.append(R.chat_prompt(u, R.SMOLLM2_SYSTEM if rng.random() < 0.7 else None))
    return out


# ---------------------------------------------------------------- data (teacher)

def generate_batch(torch, model, prompts, gen_len, temps, eos, gen):
    """Left-padded batched generation. prompts: list of id lists; temps per row (0 = greedy).
    Returns (gen ids [B, G], valid [B, G] bool, topk idx [B, G, K], topk val, lse [B, G])."""
    B = len(prompts)
    P = max(len(p) for p in prompts)
    pad = [P - len(p) for p in prompts]
    idx = torch.tensor([[0] * pad[b] + prompts[b] for b in range(B)], dtype=torch.long)
    S = P + gen_len
    padt = torch.tensor(pad)
    keyok = torch.arange(S).unsqueeze(0) >= padt.unsqueeze(1)  # [B, S]
    caches = model.new_caches(B, S)
    temps_t = torch.tensor(temps, dtype=torch.float32)
    out = torch.zeros(B, gen_len, dtype=torch.long)
    valid = torch.ones(B, gen_len, dtype=torch.bool)
    kidx = torch.zeros(B, gen_len, TOPK, dtype=torch.int32)
    kval = torch.zeros(B, gen_len, TOPK, dtype=torch.float16)
    lse = torch.zeros(B, gen_len)
    done = torch.zeros(B, dtype=torch.bool)
    n, cur = 0, idx
    with torch.no_grad():
        for j in range(gen_len):
            T = cur.shape[1]
            pos = (torch.arange(n, n + T).unsqueeze(0) - padt.unsqueeze(1)).clamp(min=0)
            causal = torch.arange(n + T).unsqueeze(0) <= torch.arange(n, n + T).unsqueeze(1)
            diag = torch.arange(n + T).unsqueeze(0) == torch.arange(n, n + T).unsqueeze(1)
            # pad queries see only themselves (no all-masked row, no NaN in the cache)
            mask = (causal.unsqueeze(0) & (keyok[:, None, :n + T] | diag.unsqueeze(0))).unsqueeze(1)
            h = model.hidden(cur, pos, mask, caches)[:, -1]
            lg = h @ model.head_weight().t()  # [B, V]
            n += T
            v, i = lg.topk(TOPK, -1)
            kidx[:, j] = i.int()
            kval[:, j] = v.half()
            lse[:, j] = torch.logsumexp(lg, -1)
            greedy = lg.argmax(-1)
            pr = torch.softmax(lg / temps_t.clamp(min=1e-3).unsqueeze(1), -1)
            samp = torch.multinomial(pr, 1, generator=gen).squeeze(1)
            t = torch.where(temps_t > 0, samp, greedy)
            valid[:, j] = ~done
            out[:, j] = t
            done |= t == eos
            if bool(done.all()):
                valid[:, j + 1:] = False
                break
            cur = t.unsqueeze(1)
    return out, valid, kidx, kval, lse


def cmd_data(a):
    torch = R.torch_setup(a.seed, a.threads)
    model, hp, reader = R.model_from_gguf(TARGET)
    tok = R.Tok(reader, TARGET)
    files = ["valid.txt"] if a.split == "val" else ["train_00.txt", "train_01.txt", "train_02.txt"]
    stories = [s for f in files for s in R.read_stories(os.path.join(TS, f))]
    rng = random.Random(a.seed + (1000 if a.split == "val" else 0))
    gen = torch.Generator().manual_seed(a.seed)
    os.makedirs(WORK, exist_ok=True)
    t0, shard, rows_done, toks = time.time(), 0, 0, 0
    prefix = "val" if a.split == "val" else "data"
    while True:
        while os.path.exists(os.path.join(WORK, "%s-%s-%04d.npz" % (prefix, a.tag, shard))):
            shard += 1
        if a.rows and rows_done >= a.rows:
            break
        if a.minutes and time.time() - t0 > a.minutes * 60:
            break
        chat = rng.random() < a.chat_frac
        B = a.batch
        if chat:
            texts = chat_prompts(stories, rng, B)
            pids = [tok.encode(t, special=True) for t in texts]
            glen = a.gen_chat
        else:
            texts = story_openings(stories, rng, B)
            pids = [tok.encode(t) for t in texts]
            glen = a.gen_story
        # similar lengths in one batch: sort, keep the pad small
        pids.sort(key=len)
        temps = [0.0 if b % 2 == 0 else 0.7 for b in range(B)]
        g, valid, kidx, kval, lse = generate_batch(torch, model, pids, glen, temps, tok.eos, gen)
        tk, off, plen, glens, KI, KV, LS = [], [0], [], [], [], [], []
        for b in range(B):
            gl = int(valid[b].sum())
            seq = pids[b] + g[b, :gl].tolist()
            tk += seq
            off.append(len(tk))
            plen.append(len(pids[b]))
            glens.append(gl)
            KI.append(kidx[b, :gl].numpy())
            KV.append(kval[b, :gl].numpy())
            LS.append(lse[b, :gl].numpy())
        path = os.path.join(WORK, "%s-%s-%04d.npz" % (prefix, a.tag, shard))
        np.savez(path, tok=np.array(tk, np.int32), off=np.array(off, np.int64),
                 plen=np.array(plen, np.int32), glen=np.array(glens, np.int32),
                 kidx=np.concatenate(KI), kval=np.concatenate(KV), lse=np.concatenate(LS),
                 chat=np.array([chat]), temps=np.array(temps, np.float32))
        rows_done += B
        toks += sum(glens)
        el = time.time() - t0
        R.log("data %s: shard %d (%s) %d rows, %d teacher positions, %.1f pos/s, %.0f s" % (
            a.split, shard, "chat" if chat else "story", rows_done, toks, toks / el, el))
        if shard == 0 or a.show:
            R.log("  e.g. %r" % tok.decode(g[1, :int(valid[1].sum())].tolist())[:300])
        shard += 1


# ---------------------------------------------------------------- train

def load_shards(pattern, exclude=(), only=None):
    """Teacher rows of the shards matching pattern (minus the names in exclude; or only the
    names in only)."""
    rows = []  # (tokens int64, plen, kidx [g,K], kval [g,K] f32, lse [g])
    for f in sorted(glob.glob(os.path.join(WORK, pattern))):
        if os.path.basename(f) in exclude or (only is not None and os.path.basename(f) not in only):
            continue
        try:
            z = np.load(f)
            tk, off, plen, glen = z["tok"], z["off"], z["plen"], z["glen"]
            ki, kv, ls = z["kidx"], z["kval"], z["lse"]
        except Exception as e:  # a shard being written
            R.log("skip %s: %s" % (f, e))
            continue
        g0 = 0
        for b in range(len(plen)):
            gl = int(glen[b])
            if gl > 0:
                rows.append((tk[off[b]:off[b + 1]].astype(np.int64), int(plen[b]),
                             ki[g0:g0 + gl].astype(np.int64), kv[g0:g0 + gl].astype(np.float32),
                             ls[g0:g0 + gl].astype(np.float32)))
            g0 += gl
    return rows


def text_stories(tok, files, cache):
    path = os.path.join(WORK, cache)
    if os.path.exists(path):
        z = np.load(path)
        return z["tok"], z["off"]
    stories = [s for f in files for s in R.read_stories(os.path.join(TS, f))]
    enc = tok.tk_plain.encode_batch(stories, add_special_tokens=False)
    ids = [np.array(e.ids, np.int32) for e in enc]
    off = np.cumsum([0] + [len(x) for x in ids])
    t = np.concatenate(ids)
    np.savez(path, tok=t, off=off)
    return t, off


def new_draft(torch):
    Llama = R.build_model_class()
    return Llama(DRAFT_CFG)


def causal_mask(torch, T):
    return (torch.arange(T).unsqueeze(0) <= torch.arange(T).unsqueeze(1))[None, None]


def make_batch(torch, rng, kd_rows, n_kd, text, n_text, seq):
    """Rows: KD rows (teacher data) then text rows. Returns idx [B, L], ce_tgt [B, L] (-1 =
    none), kd position list (b, t, row, j)."""
    rows, kd = [], []
    for _ in range(n_kd):
        r = kd_rows[rng.randrange(len(kd_rows))]
        rows.append(("kd", r))
    tt, toff = text
    for _ in range(n_text):
        s = rng.randrange(len(toff) - 1)
        a, b = toff[s], min(toff[s + 1], toff[s] + seq + 1)
        rows.append(("tx", tt[a:b].astype(np.int64)))
    L = max(len(r[0]) if k == "kd" else len(r) for k, r in rows) - 1
    B = len(rows)
    idx = np.zeros((B, L), np.int64)
    tgt = np.full((B, L), -1, np.int64)
    kpos, kidx, kval, klse = [], [], [], []
    for b, (k, r) in enumerate(rows):
        ids = r[0] if k == "kd" else r
        n = len(ids) - 1
        idx[b, :n] = ids[:-1]
        if k == "tx":
            tgt[b, :n] = ids[1:]
        else:
            plen = r[1]
            tgt[b, :plen - 1] = ids[1:plen]  # prompt: real next token
            g = r[2].shape[0]
            # teacher logits j predict token plen + j from input position plen - 1 + j
            ps = np.arange(plen - 1, plen - 1 + g)
            ok = ps < L
            kpos.append(b * L + ps[ok])
            kidx.append(r[2][ok])
            kval.append(r[3][ok])
            klse.append(r[4][ok])
    T = torch.from_numpy
    kd_t = None
    if kpos:
        kd_t = (T(np.concatenate(kpos)), T(np.concatenate(kidx)), T(np.concatenate(kval)),
                T(np.concatenate(klse)))
    return T(idx), T(tgt), kd_t


def draft_losses(torch, model, idx, tgt, kd, cols, remap, argmax_w=0.5):
    """Loss over the vocabulary subset cols (remap: vocab -> column or -1)."""
    B, L = idx.shape
    pos = torch.arange(L).unsqueeze(0).expand(B, L)
    h = model.hidden(idx, pos, causal_mask(torch, L)).reshape(B * L, -1)
    W = model.tok_embeddings.weight.index_select(0, cols)
    out = {}
    tflat = tgt.reshape(-1)
    sel = tflat >= 0
    ce_cols = remap[tflat.clamp(min=0)]
    sel = sel & (ce_cols >= 0)
    total = 0.0
    if bool(sel.any()):
        lg = h[sel] @ W.t()
        lp = lg.gather(1, ce_cols[sel].unsqueeze(1)).squeeze(1) - torch.logsumexp(lg, -1)
        out["ce"] = -lp.mean()
    if kd is not None:
        kp, ki, kv, kl = kd
        lg = h[kp] @ W.t()
        lz = torch.logsumexp(lg, -1, keepdim=True)
        c = remap[ki]  # [N, K]
        ins = c >= 0
        p = torch.exp(kv - kl.unsqueeze(1)) * ins
        lq = torch.where(ins, lg.gather(1, c.clamp(min=0)) - lz, torch.zeros_like(kv))
        q_in = (lq.exp() * ins).sum(1)
        p_tail = (1 - p.sum(1)).clamp(min=0)
        l_tail = torch.log((1 - q_in).clamp(min=1e-6))
        kdl = -(p * lq).sum(1) - p_tail * l_tail
        # entropy of the coarsened teacher, so the value is a KL (>= 0)
        ent = -(p * torch.log(p.clamp(min=1e-12))).sum(1) - p_tail * torch.log(p_tail.clamp(min=1e-12))
        out["kl"] = (kdl - ent).mean()
        out["top1"] = -(lq[:, 0] * ins[:, 0]).mean()
    return out


def full_eval(torch, model, rows, text=None, max_text_tokens=4000):
    """Full-vocabulary metrics on held-out teacher rows: coarsened KL (top-64 + tail), top-1
    agreement with the teacher's argmax, sum_k min(p_k, q_k) (a lower bound of the temp-1
    acceptance); plus NLL on held-out text."""
    model.eval()
    res = dict(kl=0.0, agree=0.0, minpq=0.0, n=0)
    with torch.no_grad():
        E = model.tok_embeddings.weight
        for ids, plen, ki, kv, kl in rows:
            ids_t = torch.from_numpy(ids[:-1]).unsqueeze(0)
            L = ids_t.shape[1]
            h = model.hidden(ids_t, torch.arange(L).unsqueeze(0), causal_mask(torch, L))[0]
            g = ki.shape[0]
            ps = np.arange(plen - 1, plen - 1 + g)
            ok = ps < L
            hh = h[torch.from_numpy(ps[ok])]
            lg = hh @ E.t()
            lq = torch.log_softmax(lg, -1)
            kit = torch.from_numpy(ki[ok])
            p = torch.exp(torch.from_numpy(kv[ok]) - torch.from_numpy(kl[ok]).unsqueeze(1))
            q = lq.gather(1, kit).exp()
            pt = (1 - p.sum(1)).clamp(min=1e-12)
            qt = (1 - q.sum(1)).clamp(min=1e-12)
            klv = (p * (torch.log(p.clamp(min=1e-12)) - torch.log(q.clamp(min=1e-12)))).sum(1) + \
                pt * (torch.log(pt) - torch.log(qt))
            res["kl"] += float(klv.sum())
            res["agree"] += float((lg.argmax(-1) == kit[:, 0]).sum())
            res["minpq"] += float(torch.minimum(p, q).sum())
            res["n"] += int(ok.sum())
        n = max(res["n"], 1)
        out = dict(kl=res["kl"] / n, agree=res["agree"] / n, minpq=res["minpq"] / n, pos=res["n"])
        if text is not None:
            tt, toff = text
            tot, cnt = 0.0, 0
            for s in range(len(toff) - 1):
                ids = torch.from_numpy(tt[toff[s]:min(toff[s + 1], toff[s] + 257)].astype(np.int64))
                if len(ids) < 2:
                    continue
                L = len(ids) - 1
                h = model.hidden(ids[:-1].unsqueeze(0), torch.arange(L).unsqueeze(0), causal_mask(torch, L))[0]
                lp = torch.log_softmax(h @ E.t(), -1)
                tot -= float(lp.gather(1, ids[1:].unsqueeze(1)).sum())
                cnt += L
                if cnt >= max_text_tokens:
                    break
            out["text_nll"] = tot / cnt
    model.train()
    return out


def pca_init(torch, model, teacher_E, teacher=None, tok=None):
    E = torch.from_numpy(teacher_E).double()
    # right singular vectors of E = eigenvectors of E^T E
    ev, V = torch.linalg.eigh(E.t() @ E)
    V = V[:, ev.argsort(descending=True)[:DRAFT_CFG["dim"]]]
    ED = (E @ V).float()
    frac = float((E @ V).pow(2).sum() / E.pow(2).sum())
    model.tok_embeddings.weight.data.copy_(ED)
    R.log("pca: top-%d components keep %.1f%% of the embedding energy" % (DRAFT_CFG["dim"], 100 * frac))
    return V.float()


def vocab_subset(text, kd_rows, n_max):
    """The most frequent tokens of the training data (a step adds random negatives)."""
    cnt = np.bincount(text[0], minlength=49152).astype(np.float64)
    for r in kd_rows:
        cnt += np.bincount(r[0], minlength=49152)
        cnt += np.bincount(r[2][:, :8].reshape(-1), minlength=49152) * 0.5
    order = np.argsort(-cnt)
    nz = int((cnt > 0).sum())
    base = order[:min(n_max, nz)]
    R.log("vocab subset: %d of %d seen tokens, covers %.3f%% of the counts" % (
        len(base), nz, 100 * cnt[base].sum() / cnt.sum()))
    return base, np.setdiff1d(np.arange(49152), base)


def cmd_train(a):
    torch = R.torch_setup(a.seed, a.threads)
    import gguf
    reader = gguf.GGUFReader(TARGET)
    tok = R.Tok(reader, TARGET)
    text = text_stories(tok, ["train_00.txt", "train_01.txt", "train_02.txt"], "text_train.npz")
    R.log("text: %d tokens in %d stories" % (len(text[0]), len(text[1]) - 1))
    hold = set(a.holdout.split(",")) if a.holdout else set()
    kd_rows = load_shards("data-*.npz", exclude=hold)
    val_rows = load_shards("val-*.npz") + load_shards("data-*.npz", only=hold)
    R.log("teacher rows: %d train (%d positions), %d val (%d positions)" % (
        len(kd_rows), sum(r[2].shape[0] for r in kd_rows), len(val_rows), sum(r[2].shape[0] for r in val_rows)))
    vtext = text_stories(tok, ["valid.txt"], "text_valid.npz")
    model = new_draft(torch)
    ck = os.path.join(WORK, "draft.pt")
    if a.resume and os.path.exists(ck):
        model.load_state_dict(torch.load(ck)["model"])
        R.log("resumed %s" % ck)
    else:
        for n_, p_ in model.named_parameters():
            if p_.dim() == 2 and "tok_embeddings" not in n_:
                torch.nn.init.normal_(p_, std=0.02)
                if n_.endswith("wo.weight") or n_.endswith("w2.weight"):
                    p_.data.mul_(1 / math.sqrt(2 * DRAFT_CFG["n_layers"]))
        tE = None
        for t in reader.tensors:
            if t.name == "token_embd.weight":
                tE = np.array(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
        V = pca_init(torch, model, tE)
        # final norm: per-component RMS of the teacher's final hidden state projected on V
        tm, _, _ = R.model_from_gguf(TARGET)
        ids = torch.from_numpy(text[0][text[1][0]:text[1][0] + 192].astype(np.int64)).unsqueeze(0)
        with torch.no_grad():
            hT = tm.hidden(ids, torch.arange(ids.shape[1]).unsqueeze(0), causal_mask(torch, ids.shape[1]))[0]
        model.norm.weight.data.copy_(a.norm_init * (hT @ V).pow(2).mean(0).sqrt())
        R.log("final norm init: mean %.3f" % float(model.norm.weight.mean()))
        del tm
    base, rest = vocab_subset(text, kd_rows, a.vocab_subset)
    last_reload = time.time()
    emb = model.tok_embeddings.weight
    body = [p for n_, p in model.named_parameters() if "tok_embeddings" not in n_]
    opt = torch.optim.AdamW([{"params": body, "lr": a.lr, "weight_decay": 0.01},
                             {"params": [emb], "lr": 0.0, "weight_decay": 0.0}], betas=(0.9, 0.98))
    rng = random.Random(a.seed)
    t0 = time.time()
    budget = a.minutes * 60
    step, last_eval, hist = 0, t0, {}
    model.train()
    while True:
        el = time.time() - t0
        if el > budget:
            break
        if a.reload_minutes and time.time() - last_reload > a.reload_minutes * 60:
            last_reload = time.time()
            kd_rows = load_shards("data-*.npz", exclude=hold)
            val_rows = load_shards("val-*.npz") + load_shards("data-*.npz", only=hold)
            base, rest = vocab_subset(text, kd_rows, a.vocab_subset)
            R.log("reload: %d teacher rows (%d positions), %d val rows" % (
                len(kd_rows), sum(r[2].shape[0] for r in kd_rows), len(val_rows)))
        prog = el / budget
        lr = a.lr * min(1.0, (step + 1) / 30) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))
        opt.param_groups[0]["lr"] = lr
        frozen = prog < a.freeze
        opt.param_groups[1]["lr"] = 0.0 if frozen else lr * a.emb_lr_mult
        emb.requires_grad_(not frozen)
        negs = rng.sample(range(len(rest)), a.negatives)
        cols_np = np.sort(np.concatenate([base, rest[negs]]))
        cols = torch.from_numpy(cols_np)
        remap = torch.full((49152,), -1, dtype=torch.long)
        remap[cols] = torch.arange(len(cols_np))
        n_kd = a.batch_kd if kd_rows else 0
        idx, tgt, kd = make_batch(torch, rng, kd_rows, n_kd, text, a.batch_text, a.seq)
        ls = draft_losses(torch, model, idx, tgt, kd, cols, remap)
        loss = a.ce_weight * ls.get("ce", 0.0) + ls.get("kl", 0.0) + a.top1_weight * ls.get("top1", 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for k, v in ls.items():
            hist[k] = 0.9 * hist.get(k, float(v)) + 0.1 * float(v)
        step += 1
        if step % a.log_every == 0:
            R.log("step %d %.0fs lr %.2e%s %s" % (step, el, lr, " (emb frozen)" if frozen else "",
                                                 " ".join("%s %.3f" % kv for kv in sorted(hist.items()))))
        if time.time() - last_eval > a.eval_minutes * 60:
            last_eval = time.time()
            torch.save({"model": model.state_dict(), "cfg": DRAFT_CFG, "step": step}, ck)
            R.log("eval step %d: %s" % (step, full_eval(torch, model, val_rows[:a.val_rows])))
    torch.save({"model": model.state_dict(), "cfg": DRAFT_CFG, "step": step}, ck)
    R.log("done: %d steps in %.0f s; saved %s" % (step, time.time() - t0, ck))
    R.log("final eval: %s" % full_eval(torch, model, val_rows, vtext))


def add_train_args(sub):
    p = sub.add_parser("train")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--emb-lr-mult", type=float, default=0.2)
    p.add_argument("--freeze", type=float, default=0.5, help="fraction of the time with the embedding frozen")
    p.add_argument("--batch-kd", type=int, default=6)
    p.add_argument("--batch-text", type=int, default=6)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab-subset", type=int, default=12288)
    p.add_argument("--negatives", type=int, default=2048)
    p.add_argument("--ce-weight", type=float, default=0.5)
    p.add_argument("--top1-weight", type=float, default=0.5)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval-minutes", type=float, default=5)
    p.add_argument("--val-rows", type=int, default=32)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--reload-minutes", type=float, default=4, help="re-read the teacher shards")
    p.add_argument("--holdout", default="data-a-0002.npz,data-a-0005.npz",
                   help="teacher shards kept for validation")
    p.add_argument("--norm-init", type=float, default=0.2, help="x the teacher profile")
    p = sub.add_parser("export")
    p.add_argument("--f32", default=os.path.join(WORK, "smollm2-draft-f32.gguf"))
    p.add_argument("--out", default=os.path.join(ROOT, "models", "smollm2-draft-q8_0.gguf"))
    p.add_argument("--specdec", default=os.path.join(ROOT, "build-release", "specdec"))
    p = sub.add_parser("eval")
    p.add_argument("-m", "--model", default=os.path.join(WORK, "smollm2-draft-f32.gguf"))
    p = sub.add_parser("accept", help="specdec acceptance table of the exported pair")
    p.add_argument("--specdec", default=os.path.join(ROOT, "build-release", "specdec"))
    p.add_argument("--stories", type=int, default=10)
    p.add_argument("--chats", type=int, default=4)
    p.add_argument("--ks", type=int, nargs="+", default=[8])
    p.add_argument("--temps", type=float, nargs="+", default=[0.0, 0.7])
    p.add_argument("--seeds", type=int, default=1, help="seeds per prompt at temp > 0")
    p.add_argument("-n", type=int, default=96)


# ---------------------------------------------------------------- export / eval

def cmd_export(a):
    torch = R.torch_setup(a.seed, a.threads)
    import gguf
    ck = torch.load(os.path.join(WORK, "draft.pt"))
    c, sd = ck["cfg"], ck["model"]
    reader = gguf.GGUFReader(TARGET)
    w = gguf.GGUFWriter(a.f32, "llama")
    w.add_name("SmolLM2-135M-Instruct draft (specdec, scripts/train_smollm2_draft.py)")
    w.add_file_type(0)  # ALL_F32
    w.add_context_length(c["ctx"])
    w.add_embedding_length(c["dim"])
    w.add_block_count(c["n_layers"])
    w.add_feed_forward_length(c["hidden_dim"])
    w.add_head_count(c["n_heads"])
    w.add_head_count_kv(c["n_kv_heads"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_rope_dimension_count(c["dim"] // c["n_heads"])
    w.add_vocab_size(c["vocab_size"])
    n_copied = 0
    for k, f in reader.fields.items():
        if k.startswith("tokenizer."):
            sub_t = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(k, f.contents(), f.types[0], sub_type=sub_t)
            n_copied += 1
    g = lambda k: sd[k].float().numpy().astype(np.float32)  # noqa: E731
    w.add_tensor("token_embd.weight", g("tok_embeddings.weight"))
    w.add_tensor("output_norm.weight", g("norm.weight"))
    for i in range(c["n_layers"]):
        for gn, tn in R.GGUF_NAMES:
            w.add_tensor("blk.%d.%s.weight" % (i, gn), g("layers.%d.%s.weight" % (i, tn)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    R.log("export: %s (%d bytes), %d tokenizer keys copied" % (a.f32, os.path.getsize(a.f32), n_copied))
    subprocess.check_call([a.specdec, "quantize", a.f32, a.out, "q8_0"])
    R.log("export: %s (%d bytes)" % (a.out, os.path.getsize(a.out)))


def cmd_eval(a):
    """The exported GGUF through ref_smollm2's reader (checks the file, not the checkpoint)."""
    torch = R.torch_setup(a.seed, a.threads)
    import gguf
    model, hp, reader = R.model_from_gguf(a.model)
    tok = R.Tok(gguf.GGUFReader(TARGET), TARGET)
    vtext = text_stories(tok, ["valid.txt"], "text_valid.npz")
    val_rows = load_shards("val-*.npz")
    R.log("%s: %s" % (a.model, hp))
    print("eval %s: %s" % (os.path.basename(a.model), full_eval(torch, model, val_rows, vtext)))


def cmd_accept(a):
    """Acceptance of the exported draft with specdec: per-position acceptance (K fixed, draft
    p-min 0) and tokens per target pass, on the first --stories lines of
    scripts/prompts/stories.txt and the first --chats of scripts/prompts/chat.txt (--chat)."""
    import json
    def lines(f, n):
        out = [l.strip() for l in open(os.path.join(HERE, "prompts", f), encoding="utf-8")]
        return [l for l in out if l and not l.startswith("#")][:n]
    prompts = [("story", ["-p", l]) for l in lines("stories.txt", a.stories)] + \
              [("chat", ["--chat", "-p", l]) for l in lines("chat.txt", a.chats)]
    cfg = os.path.join(ROOT, "configs", "smollm2-135m-pair.json")
    table = {}
    for temp in a.temps:
        for K in a.ks:
            for kind, pa in prompts:
                for seed in range(a.seeds if temp > 0 else 1):
                    cmd = [a.specdec, "generate", "--config", cfg, "--draft-policy", "fixed", "-k",
                           str(K), "--draft-p-min", "0", "--temp", str(temp), "--top-k", "0",
                           "--top-p", "1", "-s", str(seed), "-n", str(a.n), "-t", str(a.threads),
                           "--json", "--log-disable"] + pa
                    st = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                                   check=True).stdout)["stats"]
                    for key in ((temp, K, kind), (temp, K, "all")):
                        t = table.setdefault(key, dict(passes=0, gen=0, drafted=0, acc=0,
                                                       pos=np.zeros(K), w=0))
                        t["passes"] += st["n_target_passes"]
                        t["gen"] += st["n_generated"]
                        t["drafted"] += st["n_drafted"]
                        t["acc"] += st["n_accepted"]
                        t["pos"] += np.array(st["per_position_acceptance"][:K]) * st["n_target_passes"]
                        t["w"] += st["n_target_passes"]
            for kind in ("story", "chat", "all"):
                t = table.get((temp, K, kind))
                if not t:
                    continue
                pos = t["pos"] / max(t["w"], 1)
                print("temp %.1f K %d %-5s acceptance %.3f tokens/pass %.2f per position %s" % (
                    temp, K, kind, t["acc"] / max(t["drafted"], 1), t["gen"] / max(t["passes"], 1),
                    " ".join("%.2f" % x for x in pos)), flush=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("data", help="teacher continuations + top-64 logits")
    p.add_argument("--split", choices=["train", "val"], default="train")
    p.add_argument("--tag", default="a", help="shard name tag (several runs can add shards)")
    p.add_argument("--minutes", type=float, default=0, help="stop after this long (0 = off)")
    p.add_argument("--rows", type=int, default=0, help="stop after this many rows (0 = off)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--gen-story", type=int, default=128)
    p.add_argument("--gen-chat", type=int, default=128)
    p.add_argument("--chat-frac", type=float, default=0.35)
    p.add_argument("--show", action="store_true")
    add_train_args(sub)
    a = ap.parse_args(argv)
    globals()["cmd_" + a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
