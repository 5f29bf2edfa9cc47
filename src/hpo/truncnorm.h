// The truncated normal distribution as Optuna's TPE evaluates and samples it
// (optuna/samplers/_tpe/_truncnorm.py, ported function by function so that log-densities agree
// with Optuna's to rounding): log Phi, the log of the normal mass on [a, b], the log-density and
// the quantile function of N(0, 1) truncated to [a, b].
#pragma once

namespace ftune::hpo::truncnorm {

double ndtr(double a);                      // Phi(a)
double log_ndtr(double a);                  // log Phi(a), accurate in both tails
double log_gauss_mass(double a, double b);  // log(Phi(b) - Phi(a)), a <= b
// log pdf at x of N(loc, scale) truncated to the standardized interval [a, b].
double logpdf(double x, double a, double b, double loc, double scale);
// The q-quantile (0 <= q <= 1) of N(0, 1) truncated to [a, b].
double ppf(double q, double a, double b);

}  // namespace ftune::hpo::truncnorm
