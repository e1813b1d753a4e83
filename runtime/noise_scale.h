// runtime/noise_scale.h: the gradient noise scale of a run (McCandlish, Kaplan, Amodei et al.
// 2018, "An Empirical Model of Large-Batch Training"), the batch size above which a larger
// batch stops buying fewer steps. With G the true gradient and Sigma the per-example
// covariance, the simple noise scale is
//     B_simple = tr(Sigma) / |G|^2.
// A batch of B examples gives a gradient whose expected squared norm is |G|^2 + tr(Sigma)/B,
// so the norms at two batch sizes give unbiased estimates of both (their appendix A.1):
//     |G|^2     ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
//     tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)
// Each step's pair is noisy (either can be negative); as the paper does, each is averaged
// (an exponential moving average, bias-corrected as Adam's moments) and B_simple is the ratio
// of the averages (their bias corrections, as Adam's, cancel in it). Here an example is a token
// (the loss is the mean over tokens), B_big the step's tokens and B_small one data-parallel
// replica's: |G_small|^2 is the mean over the
// replicas of the squared norm of each one's own gradient (runtime/train.h), |G_big|^2 the
// step's gradient norm, before clipping.
#ifndef NOISE_SCALE_H
#define NOISE_SCALE_H

#include <math.h>

#define NOISE_SCALE_EMA 0.95  // the averages' decay per step (about the last 20 steps)

typedef struct {
    double g2, trace;  // the moving averages of |G|^2 and tr(Sigma)
} NoiseScale;

// One step's norms: g_small_sq (the mean squared norm at b_small examples), g_big_sq (at b_big
// > b_small). Returns the current estimate of B_simple in examples, NAN while the averaged |G|^2
// is not positive.
static double noise_scale_update(NoiseScale* ns, double g_small_sq, double g_big_sq, double b_small, double b_big) {
    double g2 = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small);
    double trace = (g_small_sq - g_big_sq) / (1.0 / b_small - 1.0 / b_big);
    ns->g2 = NOISE_SCALE_EMA * ns->g2 + (1 - NOISE_SCALE_EMA) * g2;
    ns->trace = NOISE_SCALE_EMA * ns->trace + (1 - NOISE_SCALE_EMA) * trace;
    return ns->g2 > 0 ? ns->trace / ns->g2 : NAN;
}

#endif
