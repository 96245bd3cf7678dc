"""The progress API: routes, response models, hosting, the dashboard and dead letters."""
