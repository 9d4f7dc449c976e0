# nl2sql — `make demo` sets everything up and runs the demo; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO ?= demo
NL2SQL := $(BIN)/nl2sql -c $(DEMO)/nl2sql.yaml
STAMP := $(VENV)/.installed

EVAL_DEMO ?= .nl2sql/eval-demo
EVAL := $(BIN)/nl2sql -c $(EVAL_DEMO)/nl2sql.yaml eval run --baseline benchmarks

.PHONY: install demo test test-slow test-fast lint evals clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev,postgres,otel,dask,mcp]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/nl2sql init --demo $(DEMO) --force
	$(NL2SQL) datasources list
	$(NL2SQL) index build
	$(NL2SQL) retrieve "How many urgent tickets are still open?" --role admin
	$(NL2SQL) sql "SELECT strftime('%Y', InvoiceDate) AS year, ROUND(SUM(Total), 2) AS revenue FROM Invoice GROUP BY year ORDER BY year" --datasource chinook --role analyst
	$(NL2SQL) sql "SELECT priority, COUNT(*) AS open_tickets FROM tickets WHERE status IN ('open', 'pending') GROUP BY priority ORDER BY open_tickets DESC" --datasource support --role support
	$(NL2SQL) sql "SELECT utm_campaign, COUNT(*) AS orders, SUM(amount) AS revenue FROM web_orders JOIN sessions USING (session_id) WHERE utm_campaign IS NOT NULL GROUP BY utm_campaign ORDER BY orders DESC LIMIT 3" --datasource webanalytics --role analyst
	@echo "A viewer may not read invoices; the refusal names nothing:"
	$(NL2SQL) sql "SELECT * FROM Invoice" --datasource chinook --role viewer || echo "(exit $$?, as expected: a refused question exits 1)"
	@echo "Questions, answered by the ask flow. A verified query needs no model:"
	$(NL2SQL) ask "How much did we earn in each year?" --role analyst
	$(NL2SQL) ask "How many urgent tickets are still open?" --role support
	@echo "A free-form question needs a model (OPENAI_API_KEY, ANTHROPIC_API_KEY, or NL2SQL_LLM_BASE_URL and NL2SQL_LLM_MODEL for a local server, set before 'make demo'; see docs/models.md):"
	$(NL2SQL) ask "Which genres sell best in Germany?" --role analyst || echo "(exit $$?, as expected without a model)"
	@echo "The first question started the project's question desk, which answered the others warm:"
	@$(NL2SQL) desk status || true

test: install
	$(BIN)/python -m pytest -n 2 -q -m "not slow"

test-slow: install
	$(BIN)/python -m pytest -n 2 -q -m slow

test-fast: install
	$(BIN)/python -m pytest -n 2 -q -m "not slow and not prefect and not postgres"

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

# The key-free evals on a fresh demo, each gated against the committed records under benchmarks/.
evals: install
	$(BIN)/nl2sql init --demo $(EVAL_DEMO) --force
	$(BIN)/nl2sql -c $(EVAL_DEMO)/nl2sql.yaml index build
	$(EVAL) --mode plans --suite suites/chinook.yaml
	$(EVAL) --mode retrieval --suite suites/chinook.yaml
	$(EVAL) --mode retrieval --suite suites/routing.yaml

clean:
	rm -rf $(VENV) $(DEMO) .nl2sql .pytest_cache .ruff_cache
