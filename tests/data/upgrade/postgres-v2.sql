--
-- PostgreSQL database dump
--

\restrict CQU4BhkKzh9ONDvuPlnE09OMQ1H41WdNRUlNiDrHfdygrP6hHpSjorLiPX0Wl3Q

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: callgate_decisions_append_only(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callgate_decisions_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'decisions are append-only'; END $$;


--
-- Name: callgate_events_append_only(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callgate_events_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'events are append-only'; END $$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: callgate_attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_attempts (
    attempt_id text NOT NULL,
    invocation_id text NOT NULL,
    number integer NOT NULL,
    executor_id text NOT NULL,
    jti text NOT NULL,
    started_at text NOT NULL,
    credential_expires_at text NOT NULL,
    outcome text NOT NULL,
    failure_class text NOT NULL,
    finished_at text NOT NULL,
    external_resource_id text NOT NULL,
    http_status integer NOT NULL,
    cost_micros bigint NOT NULL,
    retry_reason text NOT NULL,
    retry_after text NOT NULL
);


--
-- Name: callgate_decisions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_decisions (
    decision_id text NOT NULL,
    at text NOT NULL,
    tenant text NOT NULL,
    subject text NOT NULL,
    capability text NOT NULL,
    resource text NOT NULL,
    context_digest text NOT NULL,
    context_keys text NOT NULL,
    decision text NOT NULL,
    policy_revision text NOT NULL,
    trace_id text NOT NULL,
    span_id text NOT NULL,
    parent_span_id text NOT NULL
);


--
-- Name: callgate_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_events (
    invocation_id text NOT NULL,
    seq integer NOT NULL,
    event_id text NOT NULL,
    at text NOT NULL,
    kind text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    trace_id text NOT NULL,
    span_id text NOT NULL,
    data text NOT NULL
);


--
-- Name: callgate_fed_results; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_fed_results (
    invocation_id text NOT NULL,
    session_id text NOT NULL,
    model_call_id text NOT NULL,
    at text NOT NULL,
    message_sha256 text NOT NULL,
    seq bigint NOT NULL
);


--
-- Name: callgate_fed_results_seq_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.callgate_fed_results_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: callgate_fed_results_seq_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.callgate_fed_results_seq_seq OWNED BY public.callgate_fed_results.seq;


--
-- Name: callgate_idempotency; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_idempotency (
    tenant text NOT NULL,
    subject text NOT NULL,
    tool_name text NOT NULL,
    tool_version text NOT NULL,
    idem_key text NOT NULL,
    digest text NOT NULL,
    invocation_id text NOT NULL,
    state text NOT NULL,
    outcome text NOT NULL,
    result bytea,
    external_resource_id text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    retention_us bigint NOT NULL,
    CONSTRAINT callgate_idempotency_retention_us_check CHECK ((retention_us > 0)),
    CONSTRAINT callgate_idempotency_state_check CHECK ((state = ANY (ARRAY['claimed'::text, 'completed'::text, 'released'::text])))
);


--
-- Name: callgate_invocations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_invocations (
    invocation_id text NOT NULL,
    session_id text NOT NULL,
    model_call_id text NOT NULL,
    proposal_id text NOT NULL,
    tool_name text NOT NULL,
    tool_version text NOT NULL,
    tenant text NOT NULL,
    subject text NOT NULL,
    state text NOT NULL,
    raw_arguments bytea NOT NULL,
    digest text NOT NULL,
    normalized_arguments bytea NOT NULL,
    decision text,
    rejection text,
    idempotency_key text NOT NULL,
    deadline text NOT NULL,
    confirmation_expires_at text NOT NULL,
    policy_revision text NOT NULL,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    external_resource_id text DEFAULT ''::text NOT NULL,
    commit_time text DEFAULT ''::text NOT NULL,
    cancel_requested_at text DEFAULT ''::text NOT NULL
);


--
-- Name: callgate_redemptions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_redemptions (
    attempt_id text NOT NULL,
    secret_name text NOT NULL,
    at text NOT NULL
);


--
-- Name: callgate_results; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_results (
    invocation_id text NOT NULL,
    status text NOT NULL,
    message bytea NOT NULL,
    truncated boolean NOT NULL,
    remaining bytea NOT NULL,
    page_token text NOT NULL,
    redactions integer NOT NULL,
    created_at text NOT NULL,
    nonce text NOT NULL
);


--
-- Name: callgate_schema_version; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_schema_version (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone NOT NULL
);


--
-- Name: callgate_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_sessions (
    session_id text NOT NULL,
    tenant text NOT NULL,
    subject text NOT NULL,
    timezone text NOT NULL,
    locale text NOT NULL,
    budgets text NOT NULL,
    tool_allowlist text NOT NULL,
    opened_at text NOT NULL
);


--
-- Name: callgate_snapshots; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_snapshots (
    seq bigint NOT NULL,
    revision text NOT NULL,
    at text NOT NULL,
    detail text NOT NULL
);


--
-- Name: callgate_snapshots_seq_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.callgate_snapshots_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: callgate_snapshots_seq_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.callgate_snapshots_seq_seq OWNED BY public.callgate_snapshots.seq;


--
-- Name: callgate_tool_views; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_tool_views (
    session_id text NOT NULL,
    model_call_id text NOT NULL,
    tools text NOT NULL,
    spec_digests text NOT NULL,
    tool_set_digest text NOT NULL,
    created_at text NOT NULL,
    seq bigint NOT NULL
);


--
-- Name: callgate_tool_views_seq_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.callgate_tool_views_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: callgate_tool_views_seq_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.callgate_tool_views_seq_seq OWNED BY public.callgate_tool_views.seq;


--
-- Name: callgate_usage; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_usage (
    session_id text NOT NULL,
    model_calls bigint NOT NULL,
    tool_calls bigint NOT NULL,
    result_bytes bigint NOT NULL,
    cost_micros bigint NOT NULL
);


--
-- Name: callgate_fed_results seq; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_fed_results ALTER COLUMN seq SET DEFAULT nextval('public.callgate_fed_results_seq_seq'::regclass);


--
-- Name: callgate_snapshots seq; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_snapshots ALTER COLUMN seq SET DEFAULT nextval('public.callgate_snapshots_seq_seq'::regclass);


--
-- Name: callgate_tool_views seq; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_tool_views ALTER COLUMN seq SET DEFAULT nextval('public.callgate_tool_views_seq_seq'::regclass);


--
-- Data for Name: callgate_attempts; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_attempts (attempt_id, invocation_id, number, executor_id, jti, started_at, credential_expires_at, outcome, failure_class, finished_at, external_resource_id, http_status, cost_micros, retry_reason, retry_after) FROM stdin;
\.


--
-- Data for Name: callgate_decisions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_decisions (decision_id, at, tenant, subject, capability, resource, context_digest, context_keys, decision, policy_revision, trace_id, span_id, parent_span_id) FROM stdin;
\.


--
-- Data for Name: callgate_events; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_events (invocation_id, seq, event_id, at, kind, from_state, to_state, trace_id, span_id, data) FROM stdin;
pg-1	1	pg-1.1	t	proposed	\N	AUTHORIZED	t	s	{}
\.


--
-- Data for Name: callgate_fed_results; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_fed_results (invocation_id, session_id, model_call_id, at, message_sha256, seq) FROM stdin;
\.


--
-- Data for Name: callgate_idempotency; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_idempotency (tenant, subject, tool_name, tool_version, idem_key, digest, invocation_id, state, outcome, result, external_resource_id, created_at, updated_at, expires_at, retention_us) FROM stdin;
acme	alice	t	v1	k-pg	sha256:d	pg-1	claimed		\N		2026-07-19 06:00:00+00	2026-07-19 06:00:00+00	2026-07-19 07:00:00+00	3600000000
\.


--
-- Data for Name: callgate_invocations; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_invocations (invocation_id, session_id, model_call_id, proposal_id, tool_name, tool_version, tenant, subject, state, raw_arguments, digest, normalized_arguments, decision, rejection, idempotency_key, deadline, confirmation_expires_at, policy_revision, created_at, updated_at, attempts, external_resource_id, commit_time, cancel_requested_at) FROM stdin;
pg-1	s1	m	p	t	v1	acme	alice	AUTHORIZED	\\x7b7d	sha256:d	\\x	\N	\N	k-pg	2026-07-19T07:00:00Z	2026-07-19T06:05:00Z		2026-07-19T06:00:00Z	2026-07-19T06:00:00Z	0			
\.


--
-- Data for Name: callgate_redemptions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_redemptions (attempt_id, secret_name, at) FROM stdin;
\.


--
-- Data for Name: callgate_results; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_results (invocation_id, status, message, truncated, remaining, page_token, redactions, created_at, nonce) FROM stdin;
\.


--
-- Data for Name: callgate_schema_version; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_schema_version (version, name, applied_at) FROM stdin;
1	every record and the idempotency keys (one commit per answer)	2026-12-06 16:13:23.035031+00
2	deadline sweep index, tool messages fed into model calls, Authorize decisions	2026-12-06 16:13:23.035031+00
\.


--
-- Data for Name: callgate_sessions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_sessions (session_id, tenant, subject, timezone, locale, budgets, tool_allowlist, opened_at) FROM stdin;
\.


--
-- Data for Name: callgate_snapshots; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_snapshots (seq, revision, at, detail) FROM stdin;
\.


--
-- Data for Name: callgate_tool_views; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_tool_views (session_id, model_call_id, tools, spec_digests, tool_set_digest, created_at, seq) FROM stdin;
\.


--
-- Data for Name: callgate_usage; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_usage (session_id, model_calls, tool_calls, result_bytes, cost_micros) FROM stdin;
\.


--
-- Name: callgate_fed_results_seq_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.callgate_fed_results_seq_seq', 1, false);


--
-- Name: callgate_snapshots_seq_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.callgate_snapshots_seq_seq', 1, false);


--
-- Name: callgate_tool_views_seq_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.callgate_tool_views_seq_seq', 1, false);


--
-- Name: callgate_attempts callgate_attempts_invocation_id_number_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_attempts
    ADD CONSTRAINT callgate_attempts_invocation_id_number_key UNIQUE (invocation_id, number);


--
-- Name: callgate_attempts callgate_attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_attempts
    ADD CONSTRAINT callgate_attempts_pkey PRIMARY KEY (attempt_id);


--
-- Name: callgate_decisions callgate_decisions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_decisions
    ADD CONSTRAINT callgate_decisions_pkey PRIMARY KEY (decision_id);


--
-- Name: callgate_events callgate_events_event_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_events
    ADD CONSTRAINT callgate_events_event_id_key UNIQUE (event_id);


--
-- Name: callgate_events callgate_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_events
    ADD CONSTRAINT callgate_events_pkey PRIMARY KEY (invocation_id, seq);


--
-- Name: callgate_fed_results callgate_fed_results_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_fed_results
    ADD CONSTRAINT callgate_fed_results_pkey PRIMARY KEY (invocation_id, session_id, model_call_id);


--
-- Name: callgate_idempotency callgate_idempotency_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_idempotency
    ADD CONSTRAINT callgate_idempotency_pkey PRIMARY KEY (tenant, subject, tool_name, tool_version, idem_key);


--
-- Name: callgate_invocations callgate_invocations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_invocations
    ADD CONSTRAINT callgate_invocations_pkey PRIMARY KEY (invocation_id);


--
-- Name: callgate_redemptions callgate_redemptions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_redemptions
    ADD CONSTRAINT callgate_redemptions_pkey PRIMARY KEY (attempt_id, secret_name);


--
-- Name: callgate_results callgate_results_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_results
    ADD CONSTRAINT callgate_results_pkey PRIMARY KEY (invocation_id);


--
-- Name: callgate_schema_version callgate_schema_version_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_schema_version
    ADD CONSTRAINT callgate_schema_version_pkey PRIMARY KEY (version);


--
-- Name: callgate_sessions callgate_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_sessions
    ADD CONSTRAINT callgate_sessions_pkey PRIMARY KEY (session_id);


--
-- Name: callgate_snapshots callgate_snapshots_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_snapshots
    ADD CONSTRAINT callgate_snapshots_pkey PRIMARY KEY (seq);


--
-- Name: callgate_tool_views callgate_tool_views_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_tool_views
    ADD CONSTRAINT callgate_tool_views_pkey PRIMARY KEY (session_id, model_call_id);


--
-- Name: callgate_usage callgate_usage_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_usage
    ADD CONSTRAINT callgate_usage_pkey PRIMARY KEY (session_id);


--
-- Name: callgate_idempotency_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_idempotency_expires ON public.callgate_idempotency USING btree (expires_at);


--
-- Name: callgate_idempotency_invocation; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_idempotency_invocation ON public.callgate_idempotency USING btree (invocation_id);


--
-- Name: callgate_invocations_open_deadline; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_invocations_open_deadline ON public.callgate_invocations USING btree (deadline) WHERE (state = ANY (ARRAY['AUTHORIZED'::text, 'PREPARED'::text]));


--
-- Name: callgate_invocations_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_invocations_pending ON public.callgate_invocations USING btree (state, tenant) WHERE (confirmation_expires_at <> ''::text);


--
-- Name: callgate_decisions callgate_decisions_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER callgate_decisions_append_only BEFORE DELETE OR UPDATE ON public.callgate_decisions FOR EACH ROW EXECUTE FUNCTION public.callgate_decisions_append_only();


--
-- Name: callgate_events callgate_events_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER callgate_events_append_only BEFORE DELETE OR UPDATE ON public.callgate_events FOR EACH ROW EXECUTE FUNCTION public.callgate_events_append_only();


--
-- PostgreSQL database dump complete
--

\unrestrict CQU4BhkKzh9ONDvuPlnE09OMQ1H41WdNRUlNiDrHfdygrP6hHpSjorLiPX0Wl3Q

