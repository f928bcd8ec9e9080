"""Front end: the functions a user writes tensor expressions with (API section 1)."""
