// Truncated normal helpers, a port of optuna/samplers/_tpe/_truncnorm.py (see truncnorm.h).
#include "hpo/truncnorm.h"

#include <cfloat>
#include <cmath>
#include <limits>

namespace ftune::hpo::truncnorm {
namespace {

const double kSqrt2 = std::sqrt(2.0);
const double kNormPdfLogC = std::log(std::sqrt(2 * M_PI));
const double kNdtriExpApproxC = std::sqrt(3.0) / M_PI;

double ndtr_single(double a) {
  const double x = a / kSqrt2;
  if (x < -1 / kSqrt2) return 0.5 * std::erfc(-x);
  if (x < 1 / kSqrt2) return 0.5 + 0.5 * std::erf(x);
  return 1.0 - 0.5 * std::erfc(x);
}

double log_diff(double log_p, double log_q) {
  return log_p + std::log1p(-std::exp(log_q - log_p));
}

double log_sum(double log_p, double log_q) {  // np.logaddexp
  if (log_p == log_q) return log_p + std::log(2.0);
  const double m = std::max(log_p, log_q);
  return m + std::log1p(std::exp(-std::abs(log_p - log_q)));
}

// Inverse of log_ndtr: x with log Phi(x) = y (Newton steps from an asymptotic start).
double ndtri_exp(double y) {
  const bool flipped = y > -1e-2;
  const double z = flipped ? std::log(-std::expm1(y)) : y;
  double x =
      z < -5 ? -std::sqrt(-2.0 * (z + kNormPdfLogC)) : -kNdtriExpApproxC * std::log(std::expm1(-z));
  for (int i = 0; i < 100; ++i) {
    const double log_ndtr_x = log_ndtr(x);
    const double log_norm_pdf_x = -0.5 * x * x - kNormPdfLogC;
    const double dx = (log_ndtr_x - z) * std::exp(log_ndtr_x - log_norm_pdf_x);
    x -= dx;
    if (std::abs(dx) < 1e-8 * std::abs(x)) break;
  }
  return flipped ? -x : x;
}

}  // namespace

double ndtr(double a) {
  return 0.5 + 0.5 * std::erf(a / kSqrt2);
}

double log_ndtr(double a) {
  if (a > 6) return -ndtr_single(-a);
  if (a > -20) return std::log(ndtr_single(a));
  const double log_lhs = -0.5 * a * a - std::log(-a) - 0.5 * std::log(2 * M_PI);
  double last_total = 0, rhs = 1, numerator = 1, denom_factor = 1;
  const double denom_cons = 1 / (a * a);
  int sign = 1;
  for (int i = 1; std::abs(last_total - rhs) > DBL_EPSILON; ++i) {
    last_total = rhs;
    sign = -sign;
    denom_factor *= denom_cons;
    numerator *= 2 * i - 1;
    rhs += sign * numerator * denom_factor;
  }
  return log_lhs + std::log(rhs);
}

double log_gauss_mass(double a, double b) {
  if (b <= 0) return log_diff(log_ndtr(b), log_ndtr(a));
  if (a > 0) return log_diff(log_ndtr(-a), log_ndtr(-b));
  return std::log1p(-ndtr(a) - ndtr(-b));
}

double logpdf(double x, double a, double b, double loc, double scale) {
  if (a == b) return std::numeric_limits<double>::quiet_NaN();
  const double z = (x - loc) / scale;
  if (z < a || z > b) return -std::numeric_limits<double>::infinity();
  return -(z * z) / 2.0 - kNormPdfLogC - log_gauss_mass(a, b) - std::log(scale);
}

double ppf(double q, double a, double b) {
  if (a == b) return std::numeric_limits<double>::quiet_NaN();
  if (q == 0) return a;
  if (q == 1) return b;
  const double log_mass = log_gauss_mass(a, b);
  if (a < 0) return ndtri_exp(log_sum(log_ndtr(a), std::log(q) + log_mass));
  return -ndtri_exp(log_sum(log_ndtr(-b), std::log1p(-q) + log_mass));
}

}  // namespace ftune::hpo::truncnorm
