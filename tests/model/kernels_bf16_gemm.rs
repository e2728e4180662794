//! The bf16 GEMM (`model::kernels::bf16_gemm`): every backend this machine runs against an f64
//! reference over the bf16-rounded operands, on odd shapes, strided and transposed views, the
//! accumulate mode, bf16 inputs and bad input. Backends the machine lacks are skipped with the
//! reason (under `COMLRL_REQUIRE_ALL=1` a CPU without AMX or AVX512-BF16 fails instead).
use candle_core::{DType, Device, Tensor};
use comlrl::model::kernels::bf16_gemm::{self, Backend};

/// Deterministic values in [-1, 1) with a spread of magnitudes (some tiny, some near 1).
fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut h = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            let u = (h >> 11) as f64 / (1u64 << 53) as f64;
            let scale = [1.0, 0.1, 0.003][(h % 3) as usize];
            ((2.0 * u - 1.0) * scale) as f32
        })
        .collect()
}

fn tensor(rows: usize, cols: usize, seed: u64) -> Tensor {
    Tensor::from_vec(data(rows * cols, seed), (rows, cols), &Device::Cpu).unwrap()
}

fn to_f64(t: &Tensor) -> Vec<Vec<f64>> {
    t.to_dtype(DType::F64).unwrap().to_vec2::<f64>().unwrap()
}

fn bf16_round(t: &Tensor) -> Vec<Vec<f64>> {
    to_f64(&t.to_dtype(DType::BF16).unwrap())
}

/// (Σ_p a[i][p] b[p][j], Σ_p |a[i][p] b[p][j]|) in f64.
fn reference(a: &[Vec<f64>], b: &[Vec<f64>]) -> Vec<Vec<(f64, f64)>> {
    let n = b.first().map_or(0, Vec::len);
    a.iter()
        .map(|ar| {
            (0..n)
                .map(|j| {
                    ar.iter().zip(b).fold((0.0, 0.0), |(s, m), (x, br)| {
                        (s + x * br[j], m + (x * br[j]).abs())
                    })
                })
                .collect()
        })
        .collect()
}

/// Asserts `got` (m, n) = `base` + `want` within 1e-5 of Σ|a||b| per element.
fn assert_close(what: &str, got: &Tensor, base: Option<&[Vec<f64>]>, want: &[Vec<(f64, f64)>]) {
    let got = to_f64(got);
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (i, (gr, wr)) in got.iter().zip(want).enumerate() {
        assert_eq!(gr.len(), wr.len(), "{what}: columns");
        for (j, (g, (w, mag))) in gr.iter().zip(wr).enumerate() {
            let w = w + base.map_or(0.0, |b| b[i][j]);
            let tol = 1e-5 * mag + 1e-6 * w.abs() + 1e-30;
            assert!(
                (g - w).abs() <= tol,
                "{what}: [{i}, {j}] = {g}, want {w} (tol {tol:e})"
            );
        }
    }
}

/// The backends to test here, skipping the others with the reason.
fn backends() -> Vec<Backend> {
    Backend::ALL
        .into_iter()
        .filter(|b| {
            let ok = b.usable();
            if !ok {
                comlrl_testutil::skip(&format!(
                    "the {} backend: this CPU/OS does not run it",
                    b.name()
                ));
            }
            ok
        })
        .collect()
}

const SIZES: [usize; 6] = [1, 3, 17, 33, 64, 100];

#[test]
fn matmul_matches_the_bf16_reference_on_odd_shapes() {
    for backend in backends() {
        for &m in &SIZES {
            for &n in &SIZES {
                for &k in &[1usize, 17, 33, 100] {
                    let (a, b) = (tensor(m, k, 1 + m as u64), tensor(k, n, 2 + n as u64));
                    let want = reference(&bf16_round(&a), &bf16_round(&b));
                    let got = bf16_gemm::matmul_with(backend, &a, &b).unwrap();
                    assert_eq!(got.dims2().unwrap(), (m, n));
                    assert!(got.is_contiguous());
                    assert_close(
                        &format!("{} {m}x{k}x{n}", backend.name()),
                        &got,
                        None,
                        &want,
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_reads_transposed_strided_and_bf16_views() {
    for backend in backends() {
        let (m, k, n) = (37, 70, 45);
        // a as the transpose of a contiguous (k, m); b as a column window of a wider matrix
        // starting at an offset (row stride 60, not contiguous).
        let at = tensor(k, m, 3);
        let a = at.t().unwrap();
        let wide = tensor(k, 60, 4);
        let b = wide.narrow(1, 7, n).unwrap();
        assert!(!a.is_contiguous() && !b.is_contiguous());
        let want = reference(&bf16_round(&a), &bf16_round(&b));
        let got = bf16_gemm::matmul_with(backend, &a, &b).unwrap();
        assert_close(&format!("{} strided", backend.name()), &got, None, &want);
        // A weight used as Wᵀ: b = w.t() with w (n, k) contiguous.
        let w = tensor(n, k, 5);
        let want = reference(&bf16_round(&a), &bf16_round(&w.t().unwrap()));
        let got = bf16_gemm::matmul_with(backend, &a, &w.t().unwrap()).unwrap();
        assert_close(&format!("{} w.t()", backend.name()), &got, None, &want);
        // bf16 operands give the same result as their f32 widening.
        let (ab, bb) = (
            a.to_dtype(DType::BF16).unwrap(),
            b.to_dtype(DType::BF16).unwrap(),
        );
        let got_b = bf16_gemm::matmul_with(backend, &ab, &bb).unwrap();
        let got_f = bf16_gemm::matmul_with(backend, &a, &b).unwrap();
        assert_eq!(
            got_b.to_vec2::<f32>().unwrap(),
            got_f.to_vec2::<f32>().unwrap()
        );
        // Strided bf16 views (packed from their bf16 values, strides kept): a transposed
        // bf16 tensor, a bf16 column window at an offset, and a frozen base's W as w.t().
        let a16 = at.to_dtype(DType::BF16).unwrap().t().unwrap();
        let b16 = wide.to_dtype(DType::BF16).unwrap().narrow(1, 7, n).unwrap();
        assert!(!a16.is_contiguous() && !b16.is_contiguous());
        let got_b = bf16_gemm::matmul_with(backend, &a16, &b16).unwrap();
        assert_eq!(
            got_b.to_vec2::<f32>().unwrap(),
            got_f.to_vec2::<f32>().unwrap()
        );
        let w16 = w.to_dtype(DType::BF16).unwrap();
        let got_b = bf16_gemm::matmul_with(backend, &a16, &w16.t().unwrap()).unwrap();
        let got_f = bf16_gemm::matmul_with(backend, &a, &w.t().unwrap()).unwrap();
        assert_eq!(
            got_b.to_vec2::<f32>().unwrap(),
            got_f.to_vec2::<f32>().unwrap()
        );
    }
    // A bf16 weight packed in parallel (over 2^16 packed elements), as w.t() and as w.
    let (m, k, n) = (9, 700, 300);
    let (x, w) = (tensor(m, k, 8), tensor(n, k, 9));
    let w16 = w.to_dtype(DType::BF16).unwrap();
    let dy = tensor(m, n, 10);
    for backend in backends() {
        for (got, want) in [
            (
                bf16_gemm::matmul_with(backend, &x, &w16.t().unwrap()),
                bf16_gemm::matmul_with(backend, &x, &w.t().unwrap()),
            ),
            (
                bf16_gemm::matmul_with(backend, &dy, &w16),
                bf16_gemm::matmul_with(backend, &dy, &w),
            ),
        ] {
            assert_eq!(
                got.unwrap().to_vec2::<f32>().unwrap(),
                want.unwrap().to_vec2::<f32>().unwrap()
            );
        }
    }
}

#[test]
fn large_products_over_several_tasks_and_k_chunks_match() {
    // 200 × 300 outputs: several 128 × 256 tasks (run in parallel); K = 2100: two K chunks.
    let (m, k, n) = (200, 2100, 300);
    let (a, b) = (tensor(m, k, 6), tensor(k, n, 7));
    let want = reference(&bf16_round(&a), &bf16_round(&b));
    for backend in backends() {
        let got = bf16_gemm::matmul_with(backend, &a, &b).unwrap();
        assert_close(&format!("{} large", backend.name()), &got, None, &want);
    }
    // The rounding is real: the f32 operands' exact product differs by more than the tolerance.
    let exact = reference(&to_f64(&a), &to_f64(&b));
    let worst = exact
        .iter()
        .flatten()
        .zip(want.iter().flatten())
        .map(|((e, mag), (w, _))| (e - w).abs() / mag)
        .fold(0.0, f64::max);
    assert!(worst > 1e-4, "bf16 rounding changed nothing ({worst:e})");
}

#[test]
fn add_matmul_tn_accumulates_in_place() {
    for backend in backends() {
        for (m, n, k) in [
            (1, 1, 1),
            (17, 33, 100),
            (64, 3, 33),
            (100, 64, 17),
            (150, 270, 130),
        ] {
            let acc = tensor(m, n, 8);
            let base = to_f64(&acc);
            let (a, b) = (tensor(k, m, 9), tensor(k, n, 10));
            let want = reference(&bf16_round(&a.t().unwrap()), &bf16_round(&b));
            bf16_gemm::add_matmul_tn_with(backend, &acc, &a, &b).unwrap();
            assert_close(
                &format!("{} acc {m}x{n}x{k}", backend.name()),
                &acc,
                Some(&base),
                &want,
            );
        }
        // Strided operands: a given as the transpose of a contiguous (m, k).
        let (m, n, k) = (20, 9, 40);
        let acc = tensor(m, n, 11);
        let base = to_f64(&acc);
        let a = tensor(m, k, 12).t().unwrap();
        let b = tensor(n, k, 13).t().unwrap();
        let want = reference(&bf16_round(&a.t().unwrap()), &bf16_round(&b));
        bf16_gemm::add_matmul_tn_with(backend, &acc, &a, &b).unwrap();
        assert_close(
            &format!("{} acc strided", backend.name()),
            &acc,
            Some(&base),
            &want,
        );
    }
}

#[test]
fn the_default_backend_is_the_fastest_usable_one() {
    let name = bf16_gemm::backend();
    let first = Backend::ALL.into_iter().find(|b| b.usable()).unwrap();
    assert_eq!(name, first.name());
    eprintln!("bf16_gemm backend here: {name}");
    let (a, b) = (tensor(5, 7, 14), tensor(7, 3, 15));
    let got = bf16_gemm::matmul(&a, &b).unwrap();
    let want = reference(&bf16_round(&a), &bf16_round(&b));
    assert_close("default", &got, None, &want);
}

#[test]
fn bad_input_is_an_error_naming_the_problem() {
    let err = |r: candle_core::Result<_>| format!("{}", r.map(|_: ()| ()).unwrap_err());
    let (a, b) = (tensor(3, 4, 1), tensor(5, 2, 2));
    let e = err(bf16_gemm::matmul(&a, &b).map(|_| ()));
    assert!(e.contains("inner sizes differ"), "{e}");
    let a64 = a.to_dtype(DType::F64).unwrap();
    let e = err(bf16_gemm::matmul(&a64, &tensor(4, 2, 3)).map(|_| ()));
    assert!(e.contains("must be f32 or bf16"), "{e}");
    let acc = tensor(4, 2, 4);
    let e = err(bf16_gemm::add_matmul_tn(
        &acc,
        &tensor(3, 4, 5),
        &tensor(2, 2, 6),
    ));
    assert!(e.contains("shapes differ"), "{e}");
    let acc_t = tensor(2, 4, 7).t().unwrap();
    let e = err(bf16_gemm::add_matmul_tn(
        &acc_t,
        &tensor(3, 4, 5),
        &tensor(3, 2, 6),
    ));
    assert!(e.contains("contiguous"), "{e}");
    for backend in Backend::ALL.into_iter().filter(|b| !b.usable()) {
        let e = err(bf16_gemm::matmul_with(backend, &a, &tensor(4, 2, 3)).map(|_| ()));
        assert!(e.contains("does not run on this machine"), "{e}");
    }
}

#[test]
fn prepacked_operands_give_the_unpacked_result() {
    for backend in backends() {
        // 130 rows: a last task of 2 rows (AMX configures 2-row tiles for it).
        for (m, k, n) in [(1, 33, 100), (16, 64, 17), (100, 70, 300), (130, 70, 300)] {
            let a = tensor(m, k, 16);
            let w = tensor(n, k, 17);
            let packed = bf16_gemm::pack_weight(&w).unwrap();
            assert_eq!((packed.k(), packed.n()), (k, n));
            let got = bf16_gemm::matmul_packed_with(backend, &a, &packed).unwrap();
            let plain = bf16_gemm::matmul_with(backend, &a, &w.t().unwrap()).unwrap();
            // Same packed operands, same blocks: the same bits.
            assert_eq!(
                got.to_vec2::<f32>().unwrap(),
                plain.to_vec2::<f32>().unwrap()
            );
            let want = reference(&bf16_round(&a), &bf16_round(&w.t().unwrap()));
            assert_close(
                &format!("{} packed {m}x{k}x{n}", backend.name()),
                &got,
                None,
                &want,
            );
            let b = tensor(k, n, 18);
            let pb = bf16_gemm::pack_rhs(&b).unwrap();
            let got = bf16_gemm::matmul_packed_with(backend, &a, &pb).unwrap();
            let want = reference(&bf16_round(&a), &bf16_round(&b));
            assert_close(&format!("{} packed rhs", backend.name()), &got, None, &want);
        }
        let packed = bf16_gemm::pack_weight(&tensor(5, 7, 19)).unwrap();
        let e = bf16_gemm::matmul_packed(&tensor(3, 8, 20), &packed).unwrap_err();
        assert!(format!("{e}").contains("inner sizes differ"), "{e}");
    }
}

#[test]
fn empty_dimensions_give_empty_or_zero_products() {
    for backend in backends() {
        let z = bf16_gemm::matmul_with(backend, &tensor(4, 0, 1), &tensor(0, 3, 2)).unwrap();
        assert_eq!(z.to_vec2::<f32>().unwrap(), vec![vec![0f32; 3]; 4]);
        let e = bf16_gemm::matmul_with(backend, &tensor(0, 5, 1), &tensor(5, 3, 2)).unwrap();
        assert_eq!(e.dims2().unwrap(), (0, 3));
        let acc = tensor(2, 3, 3);
        let before = acc.to_vec2::<f32>().unwrap();
        bf16_gemm::add_matmul_tn_with(backend, &acc, &tensor(0, 2, 4), &tensor(0, 3, 5)).unwrap();
        assert_eq!(acc.to_vec2::<f32>().unwrap(), before);
    }
}

/// Bits of a product, for bit-for-bit comparison.
fn bits(t: &Tensor) -> Vec<u32> {
    t.flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

/// A frozen bf16 base's W is packed from its bf16 values with no f32 copy: every product with
/// it equals, bit for bit, the product with its exact f32 widening, through every backend this
/// machine runs, as x · Wᵀ (W as `w.t()`) and dy · W, at odd shapes, partial panels and k-steps,
/// row and column windows at an offset, a product of several tasks and two K chunks, the
/// prepacked forms and the accumulate mode.
#[test]
fn bf16_weights_give_the_products_of_their_f32_widening_bit_for_bit() {
    let widen = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    for backend in backends() {
        let name = backend.name();
        for (m, k, n) in [
            (1, 1, 1),
            (3, 17, 5),
            (33, 64, 96),
            (17, 100, 33),
            (130, 2100, 300),
        ] {
            let w16 = tensor(n, k, 21 + n as u64).to_dtype(DType::BF16).unwrap();
            let w = widen(&w16);
            let (x, dy) = (tensor(m, k, 22), tensor(m, n, 23));
            let what = format!("{name} {m}x{k}x{n}");
            let mm = |a: &Tensor, b: &Tensor| bits(&bf16_gemm::matmul_with(backend, a, b).unwrap());
            assert_eq!(
                mm(&x, &w16.t().unwrap()),
                mm(&x, &w.t().unwrap()),
                "x·Wᵀ {what}"
            );
            assert_eq!(mm(&dy, &w16), mm(&dy, &w), "dy·W {what}");
            // Packed once for many products, pooled and owned.
            let pm = |p: bf16_gemm::PackedB, a: &Tensor| {
                bits(&bf16_gemm::matmul_packed_with(backend, a, &p).unwrap())
            };
            let want = mm(&x, &w.t().unwrap());
            assert_eq!(
                pm(bf16_gemm::pack_weight(&w16).unwrap(), &x),
                want,
                "{what}"
            );
            assert_eq!(
                pm(bf16_gemm::pack_weight_owned(&w16).unwrap(), &x),
                want,
                "{what}"
            );
            let want = mm(&dy, &w);
            assert_eq!(pm(bf16_gemm::pack_rhs(&w16).unwrap(), &dy), want, "{what}");
            assert_eq!(
                pm(bf16_gemm::pack_rhs_owned(&w16).unwrap(), &dy),
                want,
                "{what}"
            );
            // acc += dyᵀ · W with a bf16 right operand, and a bf16 left one (W as aᵀ).
            let (acc16, acc32) = (tensor(m, k, 24), tensor(m, k, 24));
            let dyt = dy.t().unwrap().contiguous().unwrap();
            bf16_gemm::add_matmul_tn_with(backend, &acc16, &dyt, &w16).unwrap();
            bf16_gemm::add_matmul_tn_with(backend, &acc32, &dyt, &w).unwrap();
            assert_eq!(bits(&acc16), bits(&acc32), "acc += dyᵀ·W {what}");
            let (acc16, acc32) = (tensor(k, m, 25), tensor(k, m, 25));
            let dyt = dy.t().unwrap();
            bf16_gemm::add_matmul_tn_with(backend, &acc16, &w16, &dyt).unwrap();
            bf16_gemm::add_matmul_tn_with(backend, &acc32, &w, &dyt).unwrap();
            assert_eq!(bits(&acc16), bits(&acc32), "acc += Wᵀ·dyᵀ {what}");
        }
        // Windows of a wider bf16 matrix at an offset: rows (a slice of W's outputs), columns
        // (a slice of its inputs, rows not contiguous) and both, as w.t() and as w.
        let big16 = tensor(90, 150, 26).to_dtype(DType::BF16).unwrap();
        let big = widen(&big16);
        for (r0, nr, c0, nc) in [(5, 70, 0, 150), (0, 90, 7, 130), (3, 49, 11, 65)] {
            let w16 = big16.narrow(0, r0, nr).unwrap().narrow(1, c0, nc).unwrap();
            let w = big.narrow(0, r0, nr).unwrap().narrow(1, c0, nc).unwrap();
            let what = format!("{name} window {r0}+{nr} x {c0}+{nc}");
            let mm = |a: &Tensor, b: &Tensor| bits(&bf16_gemm::matmul_with(backend, a, b).unwrap());
            let (x, dy) = (tensor(37, nc, 27), tensor(37, nr, 28));
            assert_eq!(
                mm(&x, &w16.t().unwrap()),
                mm(&x, &w.t().unwrap()),
                "x·Wᵀ {what}"
            );
            assert_eq!(mm(&dy, &w16), mm(&dy, &w), "dy·W {what}");
            // W as the left operand, as a transposed view too.
            let (b1, b2) = (tensor(nc, 19, 29), tensor(nr, 23, 30));
            assert_eq!(mm(&w16, &b1), mm(&w, &b1), "W·b {what}");
            assert_eq!(
                mm(&w16.t().unwrap(), &b2),
                mm(&w.t().unwrap(), &b2),
                "Wᵀ·b {what}"
            );
        }
    }
}
