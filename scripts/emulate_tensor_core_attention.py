# emulate_tensor_core_attention.py: a lane-level numpy emulation of the CUDA
# backend's bf16 tensor-core attention kernels
# (kernels/cuda/cuda_attention_tensor_core*.cu), transliterated loop by loop,
# against a float64 reference. ldmatrix (.x4, .trans), mma.m16n8k16 and the
# xor shuffles are modelled from their PTX fragment layouts (the comment at
# the top of cuda_attention_tensor_core.cuh); shared memory starts as NaN, so
# a read of anything the kernels did not load fails (mma asserts finite
# operands). It checks index math, fragment use, masking and partial tiles,
# not timing, pipelining or the hardware; keep it in step with the kernels.
# Grouped KV heads (Hkv < H) follow the kernels: K and V read from query head
# h's KV head h / (H / Hkv); the dK/dV blocks run per KV head through the
# query heads of its group.
# Usage: python3 scripts/emulate_tensor_core_attention.py (numpy; ~2 minutes).
# Prints each shape's max error / max |reference| for out, logsumexp and the
# dqkv increment, and exits nonzero beyond 1e-2 (out, dqkv) or 1e-6 (lse).
import numpy as np
import sys

PAD = 8
TILE = 64
LOG2E = np.float32(1.4426950408889634)
LN2 = np.float32(0.6931471805599453)
lanes = np.arange(32)
G = lanes // 4
TG = lanes % 4


def bf16(x):
    x = np.atleast_1d(np.asarray(x, dtype=np.float32))
    b = x.view(np.uint32).astype(np.uint64)
    b = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    r = b.astype(np.uint32).view(np.float32)
    return r


# ---- shared memory + fragment primitives -------------------------------------------------
def load_tile(smem, base, kRows, kD, glob, src, gstride, valid_rows):
    chunks = kD // 8
    st = kD + PAD
    for index in range(kRows * chunks):
        row, chunk = index // chunks, index % chunks
        valid = row < valid_rows
        frm = src + (row if valid else 0) * gstride + chunk * 8
        dst = base + row * st + chunk * 8
        smem[dst:dst + 8] = glob[frm:frm + 8] if valid else 0.0


def ldmatrix_x4(smem, addr):  # addr: [32] element addresses
    regs = []
    for i in range(4):
        rowaddr = addr[8 * i + G]
        regs.append(np.stack([smem[rowaddr + 2 * TG], smem[rowaddr + 2 * TG + 1]], axis=1))
    return regs  # 4 x [32, 2]


def ldmatrix_x4_trans(smem, addr):
    regs = []
    for i in range(4):
        a0 = addr[8 * i + 2 * TG]
        a1 = addr[8 * i + 2 * TG + 1]
        regs.append(np.stack([smem[a0 + G], smem[a1 + G]], axis=1))
    return regs


def a_addr(base, kD, row0, k0):
    return base + (row0 + lanes % 8 + (lanes // 8 % 2) * 8) * (kD + PAD) + k0 + (lanes // 16) * 8


def b_addr(base, kD, n0, k0):
    return base + (n0 + lanes % 8 + (lanes // 16) * 8) * (kD + PAD) + k0 + (lanes // 8 % 2) * 8


def bt_addr(base, kD, k0, n0):
    return base + (k0 + lanes % 8 + (lanes // 8 % 2) * 8) * (kD + PAD) + n0 + (lanes // 16) * 8


def mma(d, a, b0, b1):
    # d: [32, 4] float32 accumulators; a: 4 x [32, 2]; b0, b1: [32, 2]
    A = np.full((16, 16), np.nan)
    B = np.full((16, 8), np.nan)
    for j in range(2):
        A[G, 2 * TG + j] = a[0][:, j]
        A[G + 8, 2 * TG + j] = a[1][:, j]
        A[G, 2 * TG + 8 + j] = a[2][:, j]
        A[G + 8, 2 * TG + 8 + j] = a[3][:, j]
        B[2 * TG + j, G] = b0[:, j]
        B[2 * TG + 8 + j, G] = b1[:, j]
    assert not np.isnan(A).any() and not np.isnan(B).any()
    Cm = A @ B
    out = d.astype(np.float64)
    out[:, 0] += Cm[G, 2 * TG]
    out[:, 1] += Cm[G, 2 * TG + 1]
    out[:, 2] += Cm[G + 8, 2 * TG]
    out[:, 3] += Cm[G + 8, 2 * TG + 1]
    return out.astype(np.float32)


def a_from_acc(c, kb):  # c: list of [32,4]
    return [bf16(np.stack([c[2 * kb][:, 0], c[2 * kb][:, 1]], 1)),
            bf16(np.stack([c[2 * kb][:, 2], c[2 * kb][:, 3]], 1)),
            bf16(np.stack([c[2 * kb + 1][:, 0], c[2 * kb + 1][:, 1]], 1)),
            bf16(np.stack([c[2 * kb + 1][:, 2], c[2 * kb + 1][:, 3]], 1))]


def shfl_xor(v, m):
    return v[lanes ^ m]


# ---- forward -----------------------------------------------------------------------------
def forward(qkv, B, T, H, D, Hkv):
    C = H * D
    C3 = (H + 2 * Hkv) * D  # the qkv row stride
    st = D + PAD
    tileel = TILE * st
    out = np.full(B * T * C, np.nan, np.float32)
    lse = np.full(B * H * T, np.nan, np.float32)
    scale_log2 = np.float32(np.float32(1.0) / np.sqrt(np.float32(D)) * LOG2E)
    gridy = (T + TILE - 1) // TILE
    for bx in range(B * H):
        b, h = bx // H, bx % H
        qkv_off = b * T * C3 + h * D
        key_off = b * T * C3 + C + (h // (H // Hkv)) * D
        value_off = key_off + Hkv * D
        out_off = b * T * C + h * D
        row_off = (b * H + h) * T
        for by in range(gridy):
            smem = np.full(5 * tileel, np.nan, np.float32)  # stale smem = NaN
            row0 = (gridy - 1 - by) * TILE
            key_tiles = (min(row0 + TILE, T) + TILE - 1) // TILE
            load_tile(smem, 0, TILE, D, qkv, qkv_off + row0 * C3, C3, T - row0)

            def load_kv(buf, col0):
                kt = tileel + buf * 2 * tileel
                load_tile(smem, kt, TILE, D, qkv, key_off + col0 * C3, C3, T - col0)
                load_tile(smem, kt + tileel, TILE, D, qkv, value_off + col0 * C3, C3, T - col0)
            load_kv(0, 0)
            for warp in range(4):
                warp_row0 = row0 + 16 * warp
                qf = [ldmatrix_x4(smem, a_addr(0, D, 16 * warp, 16 * ks)) for ks in range(D // 16)]
                o = [np.zeros((32, 4), np.float32) for _ in range(D // 8)]
                row_max = [np.full(32, -np.inf, np.float32) for _ in range(2)]
                row_sum = [np.zeros(32, np.float32) for _ in range(2)]
                for tile in range(key_tiles):
                    col0 = tile * TILE
                    # emulate double buffering: buffer tile%2 holds tile's data
                    load_kv(tile % 2, col0)
                    kt = tileel + (tile % 2) * 2 * tileel
                    vt = kt + tileel
                    s = [np.zeros((32, 4), np.float32) for _ in range(TILE // 8)]
                    for ks in range(D // 16):
                        for nb in range(0, TILE // 8, 2):
                            bb = ldmatrix_x4(smem, b_addr(kt, D, 8 * nb, 16 * ks))
                            s[nb] = mma(s[nb], qf[ks], bb[0], bb[1])
                            s[nb + 1] = mma(s[nb + 1], qf[ks], bb[2], bb[3])
                    diagonal = col0 + TILE - 1 > warp_row0
                    for nb in range(TILE // 8):
                        for e in range(4):
                            qi = warp_row0 + G + 8 * (e // 2)
                            ki = col0 + 8 * nb + 2 * TG + e % 2
                            m = diagonal & (ki > qi)
                            s[nb][:, e] = np.where(m, -np.inf, s[nb][:, e] * scale_log2)
                    for i in range(2):
                        tm = row_max[i].copy()
                        for nb in range(TILE // 8):
                            tm = np.fmax(tm, np.fmax(s[nb][:, 2 * i], s[nb][:, 2 * i + 1]))
                        tm = np.fmax(tm, shfl_xor(tm, 1))
                        tm = np.fmax(tm, shfl_xor(tm, 2))
                        shift = np.where(tm == -np.inf, 0, tm).astype(np.float32)
                        rescale = np.exp2(row_max[i] - shift).astype(np.float32)
                        row_max[i] = tm
                        sm = np.zeros(32, np.float32)
                        for nb in range(TILE // 8):
                            s[nb][:, 2 * i] = np.exp2(s[nb][:, 2 * i] - shift)
                            s[nb][:, 2 * i + 1] = np.exp2(s[nb][:, 2 * i + 1] - shift)
                            sm += s[nb][:, 2 * i] + s[nb][:, 2 * i + 1]
                        row_sum[i] = row_sum[i] * rescale + sm
                        for db in range(D // 8):
                            o[db][:, 2 * i] *= rescale
                            o[db][:, 2 * i + 1] *= rescale
                    for kb in range(TILE // 16):
                        p = a_from_acc(s, kb)
                        for db in range(0, D // 8, 2):
                            bb = ldmatrix_x4_trans(smem, bt_addr(vt, D, 16 * kb, 8 * db))
                            o[db] = mma(o[db], p, bb[0], bb[1])
                            o[db + 1] = mma(o[db + 1], p, bb[2], bb[3])
                for i in range(2):
                    sm = row_sum[i].copy()
                    sm = sm + shfl_xor(sm, 1)
                    sm = sm + shfl_xor(sm, 2)
                    for l in range(32):
                        qi = warp_row0 + l // 4 + 8 * i
                        if qi >= T:
                            continue
                        inv = np.float32(1) / sm[l]
                        base = out_off + qi * C
                        for db in range(D // 8):
                            d = 8 * db + 2 * (l % 4)
                            out[base + d] = bf16(o[db][l, 2 * i] * inv)[0]
                            out[base + d + 1] = bf16(o[db][l, 2 * i + 1] * inv)[0]
                        if l % 4 == 0:
                            lse[row_off + qi] = row_max[i][l] * LN2 + np.log(sm[l])
    return out, lse


# ---- backward ----------------------------------------------------------------------------
def backward(dqkv, qkv, dout, lse, row_dot, B, T, H, D, Hkv):
    C = H * D
    C3 = (H + 2 * Hkv) * D
    group = H // Hkv
    st = D + PAD
    tileel = TILE * st
    M = 64 if D == 64 else 32
    subel = M * st
    scale = np.float32(np.float32(1.0) / np.sqrt(np.float32(D)))
    scale_log2 = np.float32(scale * LOG2E)
    gridy = (T + TILE - 1) // TILE
    dqkv = dqkv.copy()
    # dK/dV kernel: a block per (key tile, b, KV head), through its group's query heads.
    for bx in range(B * Hkv):
        b, kv = bx // Hkv, bx % Hkv
        key_off = b * T * C3 + C + kv * D
        value_off = key_off + Hkv * D
        for by in range(gridy):
            smem = np.full(2 * tileel + 4 * subel, np.nan, np.float32)
            stats = np.full(4 * M, np.nan, np.float32)
            col0 = by * TILE
            load_tile(smem, 0, TILE, D, qkv, key_off + col0 * C3, C3, T - col0)
            load_tile(smem, tileel, TILE, D, qkv, value_off + col0 * C3, C3, T - col0)
            steps_per_head = (T - col0 + M - 1) // M

            def load_step(buf, step):
                h = kv * group + step // steps_per_head
                row0 = col0 + (step % steps_per_head) * M
                qkv_off = b * T * C3 + h * D
                out_off = b * T * C + h * D
                row_off = (b * H + h) * T
                qt = 2 * tileel + buf * 2 * subel
                load_tile(smem, qt, M, D, qkv, qkv_off + row0 * C3, C3, T - row0)
                load_tile(smem, qt + subel, M, D, dout, out_off + row0 * C, C, T - row0)
                for r in range(M):
                    valid = row0 + r < T
                    stats[buf * 2 * M + r] = lse[row_off + row0 + r] * LOG2E if valid else 0
                    stats[buf * 2 * M + M + r] = row_dot[row_off + row0 + r] if valid else 0
            steps = group * steps_per_head
            for warp in range(4):
                warp_col0 = col0 + 16 * warp
                dk = [np.zeros((32, 4), np.float32) for _ in range(D // 8)]
                dv = [np.zeros((32, 4), np.float32) for _ in range(D // 8)]
                for step in range(steps):
                    row0 = col0 + (step % steps_per_head) * M
                    load_step(step % 2, step)
                    qt = 2 * tileel + (step % 2) * 2 * subel
                    gt = qt + subel
                    ls = stats[(step % 2) * 2 * M:(step % 2) * 2 * M + M]
                    ds_ = stats[(step % 2) * 2 * M + M:(step % 2) * 2 * M + 2 * M]
                    s = [np.zeros((32, 4), np.float32) for _ in range(M // 8)]
                    dp = [np.zeros((32, 4), np.float32) for _ in range(M // 8)]
                    for ks in range(D // 16):
                        kf = ldmatrix_x4(smem, a_addr(0, D, 16 * warp, 16 * ks))
                        vf = ldmatrix_x4(smem, a_addr(tileel, D, 16 * warp, 16 * ks))
                        for nb in range(0, M // 8, 2):
                            q = ldmatrix_x4(smem, b_addr(qt, D, 8 * nb, 16 * ks))
                            g = ldmatrix_x4(smem, b_addr(gt, D, 8 * nb, 16 * ks))
                            s[nb] = mma(s[nb], kf, q[0], q[1])
                            s[nb + 1] = mma(s[nb + 1], kf, q[2], q[3])
                            dp[nb] = mma(dp[nb], vf, g[0], g[1])
                            dp[nb + 1] = mma(dp[nb + 1], vf, g[2], g[3])
                    edge = warp_col0 + 15 > row0 or row0 + M > T
                    for nb in range(M // 8):
                        for e in range(4):
                            ki = warp_col0 + G + 8 * (e // 2)
                            r = 8 * nb + 2 * TG + e % 2
                            vis = (not edge) | ((ki <= row0 + r) & (row0 + r < T))
                            p = np.where(vis, np.exp2(s[nb][:, e] * scale_log2 - ls[r]), 0).astype(np.float32)
                            dp[nb][:, e] = np.where(vis, p * (dp[nb][:, e] - ds_[r]), 0)
                            s[nb][:, e] = p
                    for kb in range(M // 16):
                        pa = a_from_acc(s, kb)
                        dsa = a_from_acc(dp, kb)
                        for db in range(0, D // 8, 2):
                            g = ldmatrix_x4_trans(smem, bt_addr(gt, D, 16 * kb, 8 * db))
                            q = ldmatrix_x4_trans(smem, bt_addr(qt, D, 16 * kb, 8 * db))
                            dv[db] = mma(dv[db], pa, g[0], g[1])
                            dv[db + 1] = mma(dv[db + 1], pa, g[2], g[3])
                            dk[db] = mma(dk[db], dsa, q[0], q[1])
                            dk[db + 1] = mma(dk[db + 1], dsa, q[2], q[3])
                for i in range(2):
                    for l in range(32):
                        ki = warp_col0 + l // 4 + 8 * i
                        if ki >= T:
                            continue
                        kr = key_off + ki * C3
                        vr = value_off + ki * C3
                        for db in range(D // 8):
                            d = 8 * db + 2 * (l % 4)
                            for j in range(2):
                                dqkv[kr + d + j] = bf16(dqkv[kr + d + j] + dk[db][l, 2 * i + j] * scale)[0]
                                dqkv[vr + d + j] = bf16(dqkv[vr + d + j] + dv[db][l, 2 * i + j])[0]
    # dQ kernel: a block per (query tile, b, query head).
    for bx in range(B * H):
        b, h = bx // H, bx % H
        qkv_off = b * T * C3 + h * D
        key_off = b * T * C3 + C + (h // group) * D
        value_off = key_off + Hkv * D
        out_off = b * T * C + h * D
        row_off = (b * H + h) * T
        for by in range(gridy):
            smem = np.full(6 * tileel, np.nan, np.float32)
            row0 = (gridy - 1 - by) * TILE
            load_tile(smem, 0, TILE, D, qkv, qkv_off + row0 * C3, C3, T - row0)
            load_tile(smem, tileel, TILE, D, dout, out_off + row0 * C, C, T - row0)

            def load_kv(buf, col0):
                kt = 2 * tileel + buf * 2 * tileel
                load_tile(smem, kt, TILE, D, qkv, key_off + col0 * C3, C3, T - col0)
                load_tile(smem, kt + tileel, TILE, D, qkv, value_off + col0 * C3, C3, T - col0)
            key_tiles = (min(row0 + TILE, T) + TILE - 1) // TILE
            for warp in range(4):
                warp_row0 = row0 + 16 * warp
                lse_r, dot_r = [], []
                for i in range(2):
                    qi = warp_row0 + G + 8 * i
                    valid = qi < T
                    idx = np.where(valid, row_off + qi, 0)
                    lse_r.append(np.where(valid, lse[idx] * LOG2E, 0).astype(np.float32))
                    dot_r.append(np.where(valid, row_dot[idx], 0).astype(np.float32))
                dq = [np.zeros((32, 4), np.float32) for _ in range(D // 8)]
                for tile in range(key_tiles):
                    col0 = tile * TILE
                    load_kv(tile % 2, col0)
                    kt = 2 * tileel + (tile % 2) * 2 * tileel
                    vt = kt + tileel
                    s = [np.zeros((32, 4), np.float32) for _ in range(TILE // 8)]
                    dp = [np.zeros((32, 4), np.float32) for _ in range(TILE // 8)]
                    for ks in range(D // 16):
                        qf = ldmatrix_x4(smem, a_addr(0, D, 16 * warp, 16 * ks))
                        gf = ldmatrix_x4(smem, a_addr(tileel, D, 16 * warp, 16 * ks))
                        for nb in range(0, TILE // 8, 2):
                            k = ldmatrix_x4(smem, b_addr(kt, D, 8 * nb, 16 * ks))
                            v = ldmatrix_x4(smem, b_addr(vt, D, 8 * nb, 16 * ks))
                            s[nb] = mma(s[nb], qf, k[0], k[1])
                            s[nb + 1] = mma(s[nb + 1], qf, k[2], k[3])
                            dp[nb] = mma(dp[nb], gf, v[0], v[1])
                            dp[nb + 1] = mma(dp[nb + 1], gf, v[2], v[3])
                    edge = col0 + TILE - 1 > warp_row0 or warp_row0 + 15 >= T
                    for nb in range(TILE // 8):
                        for e in range(4):
                            qi = warp_row0 + G + 8 * (e // 2)
                            ki = col0 + 8 * nb + 2 * TG + e % 2
                            vis = (not edge) | ((ki <= qi) & (qi < T))
                            p = np.where(vis, np.exp2(s[nb][:, e] * scale_log2 - lse_r[e // 2]), 0).astype(np.float32)
                            dp[nb][:, e] = np.where(vis, p * (dp[nb][:, e] - dot_r[e // 2]), 0)
                    for kb in range(TILE // 16):
                        dsa = a_from_acc(dp, kb)
                        for db in range(0, D // 8, 2):
                            k = ldmatrix_x4_trans(smem, bt_addr(kt, D, 16 * kb, 8 * db))
                            dq[db] = mma(dq[db], dsa, k[0], k[1])
                            dq[db + 1] = mma(dq[db + 1], dsa, k[2], k[3])
                for i in range(2):
                    for l in range(32):
                        qi = warp_row0 + l // 4 + 8 * i
                        if qi >= T:
                            continue
                        qr = qkv_off + qi * C3
                        for db in range(D // 8):
                            d = 8 * db + 2 * (l % 4)
                            for j in range(2):
                                dqkv[qr + d + j] = bf16(dqkv[qr + d + j] + dq[db][l, 2 * i + j] * scale)[0]
    return dqkv


# ---- reference ---------------------------------------------------------------------------
def reference(qkv, dout, B, T, H, D, Hkv):
    group = H // Hkv
    x = qkv.astype(np.float64).reshape(B, T, H + 2 * Hkv, D).transpose(0, 2, 1, 3)
    # Each KV head repeated for its group's query heads (Hugging Face's repeat_kv).
    q = x[:, :H]
    k = np.repeat(x[:, H:H + Hkv], group, axis=1)
    v = np.repeat(x[:, H + Hkv:], group, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    mask = np.triu(np.ones((T, T), bool), 1)
    s = np.where(mask, -np.inf, s)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    l = e.sum(-1, keepdims=True)
    p = e / l
    o = p @ v  # B H T D
    lse = (m + np.log(l))[..., 0]  # B H T
    go = dout.astype(np.float64).reshape(B, T, H, D).transpose(0, 2, 1, 3)
    dv = p.transpose(0, 1, 3, 2) @ go
    dp = go @ v.transpose(0, 1, 3, 2)
    Dt = (go * o).sum(-1, keepdims=True)
    ds = p * (dp - Dt)
    dq = ds @ k / np.sqrt(D)
    dk = ds.transpose(0, 1, 3, 2) @ q / np.sqrt(D)
    # A KV head's gradient sums over its group.
    dk = dk.reshape(B, Hkv, group, T, D).sum(2)
    dv = dv.reshape(B, Hkv, group, T, D).sum(2)
    g = np.concatenate([dq, dk, dv], 1).transpose(0, 2, 1, 3).reshape(-1)  # B T (H + 2 Hkv) D
    return o.transpose(0, 2, 1, 3).reshape(-1), lse.reshape(-1), g, Dt[..., 0].reshape(-1)


def rel(a, b):
    return np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b))


def run(B, T, H, D, scale=1.5, seed=0, Hkv=None):
    Hkv = Hkv or H
    rng = np.random.default_rng(seed)
    qkv = bf16(rng.uniform(-scale, scale, B * T * (H + 2 * Hkv) * D).astype(np.float32))
    dout = bf16(rng.uniform(-1, 1, B * T * H * D).astype(np.float32))
    before = bf16(rng.uniform(-0.125, 0.125, qkv.size).astype(np.float32))
    o_ref, lse_ref, g_ref, dt_ref = reference(qkv, dout, B, T, H, D, Hkv)
    out, lse = forward(qkv, B, T, H, D, Hkv)
    # backward with reference out/lse; row_dot from bf16 out as the kernel does (fp32)
    out_b = bf16(o_ref.astype(np.float32))
    Dt = (dout.reshape(B, T, H, D).astype(np.float32) * out_b.reshape(B, T, H, D)).sum(-1).transpose(0, 2, 1).reshape(-1).astype(np.float32)
    after = backward(before, qkv, dout, lse_ref.astype(np.float32), Dt, B, T, H, D, Hkv)
    added = after.astype(np.float64) - before
    # reference gradient with D_t from the bf16 out (as the kernels see it)
    assert not np.isnan(out).any() and not np.isnan(lse).any() and not np.isnan(after).any()
    errors = rel(out, o_ref), rel(lse, lse_ref), rel(added, g_ref)
    print(f"B={B} T={T} H={H} Hkv={Hkv} D={D} scale={scale}: out {errors[0]:.2e}  lse {errors[1]:.2e}"
          f"  dqkv {errors[2]:.2e}", flush=True)
    return errors[0] <= 1e-2 and errors[1] <= 1e-6 and errors[2] <= 1e-2


if __name__ == "__main__":
    shapes = [(1, 1, 1, 64), (1, 17, 2, 64), (1, 64, 1, 64), (1, 65, 1, 64), (2, 100, 2, 64),
              (1, 17, 1, 128), (1, 63, 1, 128), (1, 130, 1, 128), (1, 200, 1, 64, 4.0),
              # grouped KV heads: 4 query heads over 2 and over 1
              (1, 100, 4, 64, 1.5, 0, 2), (2, 70, 4, 64, 1.5, 0, 1), (1, 65, 2, 128, 1.5, 0, 1)]
    sys.exit(0 if all([run(*shape) for shape in shapes]) else 1)
