"""MCMC engines (Gibbs, NUTS)."""
