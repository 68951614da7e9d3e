--
-- PostgreSQL database dump
--

\restrict zaccafaiL8fFFmuDPglJ6QRMoWpr2RS61C2jCh6KcR8oqBPCWgSOJcuMpcsiN1W

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
    AS $$ BEGIN IF TG_OP = 'DELETE' AND current_setting('callgate.retention', true) = 'on' THEN RETURN OLD; END IF; RAISE EXCEPTION 'decisions are append-only'; END $$;


--
-- Name: callgate_events_append_only(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.callgate_events_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ BEGIN IF TG_OP = 'DELETE' AND current_setting('callgate.retention', true) = 'on' THEN RETURN OLD; END IF; RAISE EXCEPTION 'events are append-only'; END $$;


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
    event_id text,
    at text,
    kind text NOT NULL,
    from_state text,
    to_state text NOT NULL,
    trace_id text NOT NULL,
    span_id text NOT NULL,
    data bytea NOT NULL
);


--
-- Name: callgate_expired_invocations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_expired_invocations (
    invocation_id text NOT NULL,
    tenant text NOT NULL,
    tool_name text NOT NULL,
    state text NOT NULL,
    updated_at text NOT NULL,
    expired_at text NOT NULL,
    exported_to text NOT NULL
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
-- Name: callgate_meter_entries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_meter_entries (
    meter text NOT NULL,
    scope text NOT NULL,
    at_ms bigint NOT NULL,
    invocation_id text NOT NULL,
    amount numeric(38,0) NOT NULL
);


--
-- Name: callgate_meter_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_meter_reservations (
    invocation_id text NOT NULL,
    meter text NOT NULL,
    scope text NOT NULL,
    amount numeric(38,0) NOT NULL,
    at_ms bigint NOT NULL,
    session_id text NOT NULL,
    expires_ms bigint NOT NULL,
    widths text NOT NULL
);


--
-- Name: callgate_meter_totals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_meter_totals (
    meter text NOT NULL,
    scope text NOT NULL,
    width_ms bigint NOT NULL,
    total numeric(38,0) NOT NULL,
    through_ms bigint NOT NULL
);


--
-- Name: callgate_meter_unknown; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_meter_unknown (
    invocation_id text NOT NULL,
    meter text NOT NULL,
    scope text NOT NULL,
    amount numeric(38,0) NOT NULL,
    at_ms bigint NOT NULL,
    session_id text NOT NULL,
    widths text NOT NULL
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
-- Name: callgate_retention_marks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.callgate_retention_marks (
    kind text NOT NULL,
    updated_at text NOT NULL,
    invocation_id text NOT NULL
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
att_2d652dacaa01963f7723a1ca	inv_01a24e9ece85fefc8dcf2f15c9e875cc	1	weather	CwekBKbJYPtfFQT7N7sMkw	2026-07-19T06:00:00Z	2026-07-19T06:00:05Z	COMMITTED		2026-07-19T06:00:00Z		0	0	final:no_failure	
att_17029bf3bb86ac76dbaee19a	inv_01a24e9ecf8fc243eb92f0450e4276f4	1	calendar-executor	HL8-FRBabDq8o5Hq13stXA	2026-07-19T06:00:00Z	2026-07-19T06:00:10Z					0	0		
att_3ce0f122214c594a784854f8	inv_01a24e9ecfee44d93fd81f345fc382b0	1	calendar-executor	8CaDMQzSv4-lJ97tuF98Rw	2026-07-19T06:00:00Z	2026-07-19T06:00:10Z	COMMITTED		2026-07-19T06:00:00Z	evt_1	0	0	final:no_failure	
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
inv_01a24e9ece85fefc8dcf2f15c9e875cc	6	\N	\N	stages	\N	PREPARED	384636cb41dce3a83aed3a57f217b9a9		\\x029d56cb6e1b310cfc175f1bbba24851524eed1f14686f810f9444c606921448d2e650f8dfabedda8e5f9b3605160b4800b59a2167666f262fa846166ae6a06cd65a995dfd3a6e18d1f9e4dfd7390c03fd2f0278f87177773afb2f43f55e004857c71a088d81335305ab26c5d7808d994d3d12499464594aa5842009adb8561d6a285e7d49d234f6c3b72a7851795ee9e3e2569f3ffd84edfe4559586c8a0a4a5a9a064548b99247899a1a63420c31a369520bc6853272cd5134d4400216f26c73b9d51c15a0090b43740dc219bfd1c1d599f0fce6ad11f12159492959f0e6b58d67feaff71d5d06ddb4194efb0652cd35b91c2cc4e85369251410804849f24015fb8a4e0ad6928bb139a9e663ef5a1060b1746824ef301a5a785eb891f849c5a0971cc1b95a63e192f2c0d5dff36f87701cde238a804e73e1dcb23bc93c77710ef91bd0b573fdf9e0527f0f13f86ad59f9fd6f2f1eb4a1e6e57b21e714c8b1b404a6257913a8d486d00721ad3bb71ef21dafec0d807f325208e26e57a9039db33afbfc8e3faa9dfe33483caf732a0da2591d47b9d6d36d35664b1ab8b29a79255921b71bcfd7b31dd0c1f36cbfea91b778ea46fe3beb62fe8808e7179a122bc562c97bf01
inv_01a24e9ece85fefc8dcf2f15c9e875cc	7	01a24e9ece942258ef72c344fb45c042	2026-07-19T06:00:00Z	attempt_started	PREPARED	EXECUTING	6643c7bd4152cbefc66e7e4e9b2abef3	9fa1d4433a5d0721	\\x7b22617474656d7074223a312c22617474656d70745f6964223a226174745f326436353264616361613031393633663737323361316361222c2263726564656e7469616c223a7b22657870697265735f6174223a22323032362d30372d31395430363a30303a30355a222c226a7469223a224377656b424b624a59507466465154374e37734d6b77222c226b6964223a227337754f46764a6d3663506f5a546b384a677a715046437a5463727a6748772d4f6c496a3761364569524d227d2c226475726174696f6e5f7573223a392c226578656375746f725f6964223a2277656174686572222c226964656d706f74656e63795f6b6579223a22227d
inv_01a24e9ece85fefc8dcf2f15c9e875cc	8	01a24e9ecebbdee87db829dc4030fc47	2026-07-19T06:00:00Z	committed	EXECUTING	COMMITTED	bf13488d7a9b713ac0098181b04f4625	a789bbd0ef39ed39	\\x7b22617474656d7074223a312c22617474656d70745f6964223a226174745f326436353264616361613031393633663737323361316361222c22636f6d6d69745f74696d65223a22323032362d30372d31395430363a30303a30305a222c226475726174696f6e5f7573223a31382c2265787465726e616c5f7265736f757263655f6964223a22222c226661696c7572655f636c617373223a22222c22687474705f737461747573223a302c226f7574636f6d65223a22434f4d4d4954544544222c22726573756c745f6c6162656c73223a5b22756e74727573746564225d2c227265747279223a7b22616c6c6f776564223a66616c73652c22617474656d7074735f6c656674223a302c226261636b6f66665f6d73223a302c22726561736f6e223a226e6f5f6661696c757265222c2273616d655f6b6579223a66616c73657d7d
inv_01a24e9ece85fefc8dcf2f15c9e875cc	9	01a24e9ecee8133e06164d47ed8729ba	2026-07-19T06:00:00Z	observed	COMMITTED	OBSERVED	06a66c3b97e008c2e45be681cd4ee951	79c5d72dd1da8e0b	\\x7b226475726174696f6e5f7573223a372c226d6573736167655f6279746573223a3331342c226d6573736167655f736861323536223a227368613235363a39313033326433323633653830323637613165613538666661643936343835306162633265326262343936373161643363366133626636303938363132383766222c22726564616374696f6e73223a302c22737461747573223a226f6b222c227472756e6361746564223a66616c73657d
inv_01a24e9ecf1c54a0639c7fc842d5bb37	2	\N	\N	stages	\N	PARSE_REJECTED	db004b7d40dedf26bc30858c7d0b69f3		\\x028d94d14ac43010457f25f4b94a92c94c326fbef8154b913499ac42b78ab4ae20fd77535916ebae621ec33073997bcfec7e15e8a870d0de26eac10480a6fdd81ac67c99fc43ba316ba0ff03c0380fc3cfec1f6dad3c03c0ed1601ebc05088f515214a7dc228854a0cc531840221674ddab204e15e83e10c99bdb5880218d8d7de27088e12a74779bdddcb74f7664eff57a9283e0b8811277d96dac7044ece42f4123241dd0b7a865227162cd4571d94d847c1842e9a82dc2c67a7ff8a6b039a3d082270e264892fd66d2db45719791abf12f3b0f2b73982f7ef2f6bf1b857b56016152735d48bab4cabd2f3301f4665f48aea77b2ba65e9aae09dbe34acebba4f
inv_01a24e9ecf5ff6f9ea00d3bbcafa96a6	6	\N	\N	stages	\N	AUTHORIZED	64c0b7c6a06d05c97b406effef5e2f13		\\x029d56db6edb300cfd97bcae494889a2a43c6ddfb03dad280aeab60648822271870d43fe7d74d2a4b97968071806648b327978cea1ef07132c54a8056b428aa634ab6fff9c378ce235f397798c3da1df2380d5cb6271c9fddc471f05e0ddddb90642a8d616896418d0514de4d9dad08a670399385513207288a5708aacb9b7c42008b59592d1e9e1af2ae8e5bb52db9964f595ae3e2ab757dde79ff8bae3a6400c47f46283a91ca95576b16260f2e28284ea49245568998229e82066046f0d524be220178fa3ededa607c9604d6d863ce502e90a69137a242e3568b7ff628b6560693531534388b83bf47f6df03c1b1ef6c5610b71e813064c688c75be9950b55f46d83734367150c45263b28a9ac324d97931de44eb4591cdde9e7aca073c87268627b0477e503cc5fb249e73d56f49893baa9f8cc2529bbc2cbad9f4409a9eab1aa5a8f7f63a9b6e3a5977fd743c14bda7f6196a889753e3dad015771e831f63fc863403d0eb1304bdf7ac7c33f22f9bb94cbf3ec9eac793ccf7a50d4b5f4155e08b239f438cd6f5b55d0df17331ec2a394eee5bb544e80939a0e893b1743878f6bc9e2f65fd5bf3b99c54da10dd7af736b1242feb68bbabea5d0e3b8a41c83ab2014b75aeec8d6ab8114e33afbf9ef50f65f328dd39eac033708af777455513b887eb22f5b13d365a177482d57e7923c2bd453c3cfc05
inv_01a24e9ecf8fc243eb92f0450e4276f4	6	\N	\N	stages	\N	AUTHORIZED	0d12345f88ca4994eb7bb7f39d774b71		\\x029d56db8adb400cfd97bc36174973d14c9eda6f689fba2c8be6d60d246149bca5a5e4df2b27cd6d13976dc1188f9931d2d1b9f861b0402a29468fe01db768c58cc6bfae0766cd2df35779823da1df2380f5eb72f996fb9974e74900ecc6d71ac88ec187586d70cde42a41b0e943cb0d0a25cbce12d7041628958280099920b6909315a8557b38aaa097ef5a6d679ad557bafaa4dc5e771fbfe39f1d7705423e228b09547db4ad7a172b066f595c9050d98aa40a2ddb40051dc48cc086d0b6240e72611cedee0fddc7222d53012e0d90dd1da4697c2341b3fb1b591ab75a6248367ad3b26bfb6ffeaf0b5e15836ed816871dc421270c3a1022a384a250b3f5249e1b92493e2860a9796b1434874974d0424cd1b028b099cda5a5fc83e5d829f9291c801fd48e4e516a4d64c42584b0c7ea22094b6df2baece6b323677aaa2a288a7aefaef3d9b6934dd787e3b1e903b3af5183b7a171ebe78abb9f004f307e413b07d0eb0304bdf7a43cfbf8a7ed42669f9f65fded591687d686955f7d76362803a2f3c09efbde6e32fc5a0bfb4e4ec17da717e36218d4f345281dbf3b7fd92c56b2f9a9e5bccd299d876e1d9ff34af2aa8e76fba6dee5afa3601b782ac634eb5b8a7820fae01c8cb2b7fe78d1ff93ed9374d7a0839f8353b8bf2aa85ac003dc36a9afcd69cebab017501d96774eb8f389c7c7df
inv_01a24e9ecf8fc243eb92f0450e4276f4	7	01a24e9ecfbccea6f20c860af8fba4ad	2026-07-19T06:00:00Z	confirmed	AUTHORIZED	PREPARED	27cd26ab0b8802f34efca6493c1c2f7b	bfb07cb2473e2b03	\\x7b22636f6e6669726d65645f6279223a22616c696365222c22646561646c696e65223a22323032362d30372d31395430363a30303a31305a222c22646967657374223a227368613235363a35363466616663383737366639353363316638343038363730356235376265376434613432353732326533633334393137363737393563663739663137666666222c226475726174696f6e5f7573223a337d
inv_01a24e9ecf8fc243eb92f0450e4276f4	8	01a24e9ecfdd881160cc3750655bc16a	2026-07-19T06:00:00Z	attempt_started	PREPARED	EXECUTING	9ec1669d31e516a8d16e7794790beedb	206c5e1cd3fca1ff	\\x7b22617474656d7074223a312c22617474656d70745f6964223a226174745f313730323962663362623836616337366462616565313961222c2263726564656e7469616c223a7b22657870697265735f6174223a22323032362d30372d31395430363a30303a31305a222c226a7469223a22484c382d46524261624471386f354871313373745841222c226b6964223a227337754f46764a6d3663506f5a546b384a677a715046437a5463727a6748772d4f6c496a3761364569524d227d2c226475726174696f6e5f7573223a382c226578656375746f725f6964223a2263616c656e6461722d6578656375746f72222c226964656d706f74656e63795f6b6579223a226b2d657865637574696e67227d
inv_01a24e9ecfee44d93fd81f345fc382b0	6	\N	\N	stages	\N	AUTHORIZED	8b5824313be3588d8ec9dce098e4289f		\\x029d56db8adb3010fd97bc3617cde832929fda6f689fba2ccbe8d60d246149bca5a5e4df3b8e37172771d92d18838c2466ce9c8b1f460b24cfd65366d28553ae7632fd331c98a65be6afd30c3a42bf47009bd7d5ea9afb49cbce9300c84e871ab021ba04d5a950332650c1a88ca12a1f29656309a2232697c56a42c8d96bb221d4485a61d23e24b9fc4d059d7c37623bf324bed29627e1f6a6fdfc13de76dc1508ba00c4da6371c1d4e26c28e09d21c1897d21c31c8baac978cc605590fa4823981ad9aa940926fbfb43774ecb091375c192ad871ba48d57d31b09eafdbfc852822be843850426e448873bffd70507c5801bb7c57107b140113c4440d4962afa928c4376540175745e008bd5192da059889c2c3112064d2cc026d29796f201cb31737473d5033faa9decb2ca16aa42a3634c07a65f24612e955f576db33872a6a3aa9c12d43b776d16bb96b76d178ec7a67b660f5153d7a171ebe782bb9b299a41f806a6514a9e4fcacbbb23e5d9c7bfec96bcf8facc9b1fcfbcec5b1b57be2941281b3270492eaadcf57693e1432d1c3a3905f79d5ebc316a54cf17a174bcb779d92ed7bcfd2de55ce794cc43b64ecf79c5695d26fb4353eff257b129f4991003598dbaea9ee8a373202ddaf8f522ff27bb276e87a02bd7282b707f1750a580873b4dca677d9ab32ccc0554fdf2ce097b3ef1f8f817
inv_01a24e9ecfee44d93fd81f345fc382b0	7	01a24e9ed0136582af7a948060c13d7d	2026-07-19T06:00:00Z	confirmed	AUTHORIZED	PREPARED	ccf3df7450f13a6a4a7f51dea0eb9131	acc5daeed47b5f85	\\x7b22636f6e6669726d65645f6279223a22616c696365222c22646561646c696e65223a22323032362d30372d31395430363a30303a31305a222c22646967657374223a227368613235363a36316136623430646630313866646436396164393861643635356233353865396661333934323439333834343333353036303934643861666232643839393361222c226475726174696f6e5f7573223a337d
inv_01a24e9ecfee44d93fd81f345fc382b0	8	01a24e9ed037a5e523a25cefa7c2e134	2026-07-19T06:00:00Z	attempt_started	PREPARED	EXECUTING	335f2d22b80c60505467e7777122398b	0c3f00dfe8c48443	\\x7b22617474656d7074223a312c22617474656d70745f6964223a226174745f336365306631323232313463353934613738343835346638222c2263726564656e7469616c223a7b22657870697265735f6174223a22323032362d30372d31395430363a30303a31305a222c226a7469223a22384361444d517a5376342d6c4a393774754639385277222c226b6964223a227337754f46764a6d3663506f5a546b384a677a715046437a5463727a6748772d4f6c496a3761364569524d227d2c226475726174696f6e5f7573223a372c226578656375746f725f6964223a2263616c656e6461722d6578656375746f72222c226964656d706f74656e63795f6b6579223a226b2d636f6d6d6974746564227d
inv_01a24e9ecfee44d93fd81f345fc382b0	9	01a24e9ed04b66d8882225613b290ac0	2026-07-19T06:00:00Z	committed	EXECUTING	COMMITTED	579724fd3ce46bb034e89a30266adabd	a03154585451e9c9	\\x7b22617474656d7074223a312c22617474656d70745f6964223a226174745f336365306631323232313463353934613738343835346638222c22636f6d6d69745f74696d65223a22323032362d30372d31395430363a30303a30305a222c226475726174696f6e5f7573223a31312c2265787465726e616c5f7265736f757263655f6964223a226576745f31222c226661696c7572655f636c617373223a22222c22687474705f737461747573223a302c226f7574636f6d65223a22434f4d4d4954544544222c227265747279223a7b22616c6c6f776564223a66616c73652c22617474656d7074735f6c656674223a302c226261636b6f66665f6d73223a302c22726561736f6e223a226e6f5f6661696c757265222c2273616d655f6b6579223a66616c73657d7d
inv_01a24e9ed06ebe72eae27f9d37c8c150	5	\N	\N	stages	\N	AUTHORIZATION_REJECTED	8e2f0041fcada7898c97dffa75828bbf		\\x029d55db6a1b3110fd17bfd6178da4d18cfcd47e43fb164c19dd1a836d8ab32994e27fef6c1c3b5eaf5d9ac0b2b08b349a393a9787bb0d3acc3506e31da79293a3c9f4cff0c2228c99bfcd33e809fd3f02d83d6f36d7dccf5e579e0510783ad44070965b6eb598d45c0c885802c612998a140088818d545fa9b0444431c1b96a8938780bb9a1167f55412fdf9ddace3cabaf74f5bb727bd77dfe05af2b6e0ac48608248e6d0dd1b7aa2757d0ca24c8c295bc48aaa665cfb6009a98c190b3e05b1234b9104c0eb72f3da7167de27eaf89a99511d28e783a92a03bfc8b2c3983408abe1409c870acf951171c3403eebe2dde7710044ac090c05a87d42cd7ec8395400dac4b8115b0d482770a1a42928c24966c74240a6c26776929efb01c3fb7616e8ec0dfd50ea1878a6438572c865fb0ba48c2529b3c6fbae5e2c4999eaa0a8aa2debbeb72f1d4c9beebc3f134f491d943b15c67c6d8ce15f630333483f80dfcd2187d3e19d677cfc9371bfff2b496c5d747d9fd7894f571b2779bd7c4d5e2d893f16863ae35f5238fa27d28919701cf797e6344b011efcafc22ab4e75973ff7ebadec7f6b3bd7f1a5d7a44ba76f3126795b2787c34aa77d30e343f4b73bc3af1ffea2d5e3e768c76af517
inv_01a24e9ed0a957ce91fa2181ebc8f7e8	6	\N	\N	stages	\N	PREPARED	2b561f7f7d911a20e74af21ea1fe69c3		\\x029d56c96edb400cfd175feb85e47016e6d47e437b0b7c9885d318b083a04e7a29fcefa56c375e15b4158481b619518f6fd1e3688121a416726a955bd7e4dc64faebb2618cb7ccdfd4190e84fe1b013cbfadd7d7dcefc3ec7701609a5e6a00bd4821a9be781449dc84a09402151aa37a870e8a7a6c2186e4b30dcceca2fa94ed4690608b1f55d0576bddcead787dd5cf3ff178e3ae2e32ab281814455d11164e9d4b2d1451918bf3a577901ea9d704999952f0c84aad83afe41426bbfbbd0e526deb2e11b45c43bc0118a39bde280f771f71c43b01aab9949652aaa9edd7fc5ff3bb2886dcb81b8e1b87f5c4d94e3928a26aa0d8b8651f0184045c050fe428c422ae0571ea73eb5c3511d740e0fab993fc83d3f09cc2fc08fca8643c868e91b2e32a44b8c7ff148096757f3ee640d40b34e27504dcbab3c11966106728df901f006cff04c9c6816b2757feb25de5c5d7a7fcfcfd29af0e158febd8d716493c9234d7b3ecdb7b9dc8e7cc1e12fb94c177be8313791ad5e659c00cab3e2c5e372f8b01f3add9f2b0c43a175d6f0f685d4750cd3f4c69d35314e5bad1c96e3a793b38ba11735fe37638c4a7613416aab5d97ca5a871cd1e829d6de3ee85903872323f908254ca1e8f8fff48c67bcab25bdaab1ee1160fbbecdee7da099fc17a38bd33c39f662c97bf01
\.


--
-- Data for Name: callgate_expired_invocations; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_expired_invocations (invocation_id, tenant, tool_name, state, updated_at, expired_at, exported_to) FROM stdin;
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
acme	alice	calendar.create_event	v1	k-parked	sha256:9686eafb59b92d41dc287cfe8c6874c48e404e93c62645321f0b6dd185707e4c	inv_01a24e9ecf5ff6f9ea00d3bbcafa96a6	claimed		\N		2026-07-19 06:00:00+00	2026-07-19 06:00:00+00	2026-07-20 06:00:00+00	86400000000
acme	alice	calendar.create_event	v1	k-executing	sha256:564fafc8776f953c1f84086705b57be7d4a425722e3c3491767795cf79f17fff	inv_01a24e9ecf8fc243eb92f0450e4276f4	claimed		\N		2026-07-19 06:00:00+00	2026-07-19 06:00:00+00	2026-07-20 06:00:00+00	86400000000
acme	alice	calendar.create_event	v1	k-committed	sha256:61a6b40df018fdd69ad98ad655b358e9fa394249384433506094d8afb2d8993a	inv_01a24e9ecfee44d93fd81f345fc382b0	completed	COMMITTED	\N	evt_1	2026-07-19 06:00:00+00	2026-07-19 06:00:00+00	2026-07-20 06:00:00+00	86400000000
acme	alice	calendar.create_event	v1	k-denied	sha256:264b3de9a3aff5274b1be83e39315df7ec5773b55dd91fd7c96fbdfa4f58b079	inv_01a24e9ed06ebe72eae27f9d37c8c150	released		\N		2026-07-19 06:00:00+00	2026-07-19 06:00:00+00	2026-07-20 06:00:00+00	86400000000
\.


--
-- Data for Name: callgate_invocations; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_invocations (invocation_id, session_id, model_call_id, proposal_id, tool_name, tool_version, tenant, subject, state, raw_arguments, digest, normalized_arguments, decision, rejection, idempotency_key, deadline, confirmation_expires_at, policy_revision, created_at, updated_at, attempts, external_resource_id, commit_time, cancel_requested_at) FROM stdin;
inv_01a24e9ece85fefc8dcf2f15c9e875cc	ses_b9f8b08561b148118267a514a9d5b5a8	mc-1	w1	weather.get	v1	acme	bob	OBSERVED	\\x7b2263697479223a20225061726973222c202264617465223a2022746f646179227d	sha256:fb5273e6b924ba7b23b3d55d530931d849d92e21a2eecc12cd775a55a7c4428a	\\x7b2263697479223a225061726973222c2264617465223a22323032362d30372d3139227d	{"effect":"allow","engine":"cedar","error_code":"","policy_ids":["weather-read-own-tenant"],"reasons":[{"code":"policy_permit","message":"","policy_id":"weather-read-own-tenant"}]}	\N		2026-07-19T06:00:05Z		sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a	2026-07-19T06:00:00Z	2026-07-19T06:00:00Z	1		2026-07-19T06:00:00Z	
inv_01a24e9ecf1c54a0639c7fc842d5bb37	ses_b9f8b08561b148118267a514a9d5b5a8	mc-1	w2	weather.get	v1	acme	bob	PARSE_REJECTED	\\x7b2263697479223a20		\\x	\N	{"code":"invalid_json","message":"Expecting value at line 1, column 10","violations":[]}				sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a	2026-07-19T06:00:00Z	2026-07-19T06:00:00Z	0			
inv_01a24e9ecf5ff6f9ea00d3bbcafa96a6	ses_74a2d0e69037435bbeea7144acc08651	mc-1	c1	calendar.create_event	v1	acme	alice	AUTHORIZED	\\x7b227469746c65223a2022e5b8a6e68aa4e785a7222c20227374617274223a2022323032362d30372d32315430393a3030222c20226475726174696f6e5f6d696e75746573223a2031307d	sha256:9686eafb59b92d41dc287cfe8c6874c48e404e93c62645321f0b6dd185707e4c	\\x7b2263616c656e6461725f6964223a227072696d617279222c226475726174696f6e5f6d696e75746573223a31302c227374617274223a22323032362d30372d32315430393a30303a30302b30383a3030222c227469746c65223a22e5b8a6e68aa4e785a7227d	{"effect":"confirm","engine":"cedar","error_code":"","policy_ids":["calendar-create-scheduler"],"reasons":[{"code":"confirm_required","message":"creating a calendar event needs the user's confirmation","policy_id":"calendar-create-scheduler"}]}	\N	k-parked	2026-07-19T06:05:00Z	2026-07-19T06:05:00Z	sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a	2026-07-19T06:00:00Z	2026-07-19T06:00:00Z	0			
inv_01a24e9ecf8fc243eb92f0450e4276f4	ses_74a2d0e69037435bbeea7144acc08651	mc-1	c2	calendar.create_event	v1	acme	alice	EXECUTING	\\x7b227469746c65223a2022e5b8a6e68aa4e785a7222c20227374617274223a2022323032362d30372d32325430393a3030222c20226475726174696f6e5f6d696e75746573223a2031307d	sha256:564fafc8776f953c1f84086705b57be7d4a425722e3c3491767795cf79f17fff	\\x7b2263616c656e6461725f6964223a227072696d617279222c226475726174696f6e5f6d696e75746573223a31302c227374617274223a22323032362d30372d32325430393a30303a30302b30383a3030222c227469746c65223a22e5b8a6e68aa4e785a7227d	{"effect":"confirm","engine":"cedar","error_code":"","policy_ids":["calendar-create-scheduler"],"reasons":[{"code":"confirm_required","message":"creating a calendar event needs the user's confirmation","policy_id":"calendar-create-scheduler"}]}	\N	k-executing	2026-07-19T06:00:10Z	2026-07-19T06:05:00Z	sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a	2026-07-19T06:00:00Z	2026-07-19T06:00:00Z	1			
inv_01a24e9ecfee44d93fd81f345fc382b0	ses_74a2d0e69037435bbeea7144acc08651	mc-1	c3	calendar.create_event	v1	acme	alice	COMMITTED	\\x7b227469746c65223a2022e5b8a6e68aa4e785a7222c20227374617274223a2022323032362d30372d32335430393a3030222c20226475726174696f6e5f6d696e75746573223a2031307d	sha256:61a6b40df018fdd69ad98ad655b358e9fa394249384433506094d8afb2d8993a	\\x7b2263616c656e6461725f6964223a227072696d617279222c226475726174696f6e5f6d696e75746573223a31302c227374617274223a22323032362d30372d32335430393a30303a30302b30383a3030222c227469746c65223a22e5b8a6e68aa4e785a7227d	{"effect":"confirm","engine":"cedar","error_code":"","policy_ids":["calendar-create-scheduler"],"reasons":[{"code":"confirm_required","message":"creating a calendar event needs the user's confirmation","policy_id":"calendar-create-scheduler"}]}	\N	k-committed	2026-07-19T06:00:10Z	2026-07-19T06:05:00Z	sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a	2026-07-19T06:00:00Z	2026-07-19T06:00:00Z	1	evt_1	2026-07-19T06:00:00Z	
inv_01a24e9ed06ebe72eae27f9d37c8c150	ses_74a2d0e69037435bbeea7144acc08651	mc-1	c4	calendar.create_event	v1	acme	alice	AUTHORIZATION_REJECTED	\\x7b227469746c65223a202278222c20227374617274223a2022323032362d30372d32305430393a3030222c20226475726174696f6e5f6d696e75746573223a203530307d	sha256:264b3de9a3aff5274b1be83e39315df7ec5773b55dd91fd7c96fbdfa4f58b079	\\x7b2263616c656e6461725f6964223a227072696d617279222c226475726174696f6e5f6d696e75746573223a3530302c227374617274223a22323032362d30372d32305430393a30303a30302b30383a3030222c227469746c65223a2278227d	{"effect":"deny","engine":"cedar","error_code":"","policy_ids":["calendar-max-duration"],"reasons":[{"code":"policy_forbid","message":"","policy_id":"calendar-max-duration"}]}	\N	k-denied			sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a	2026-07-19T06:00:00Z	2026-07-19T06:00:00Z	0			
inv_01a24e9ed0a957ce91fa2181ebc8f7e8	ses_dcec806b2b6c450a8f15d08836adc5e8	mc-1	f1	files.delete	v1	acme	carol	PREPARED	\\x7b2270617468223a20222f746d702f61227d	sha256:1dafd05b43217c63d371a0374f732f5dfba5bba98f7c4b5f6b8e31555148d596	\\x7b2270617468223a222f746d702f61227d	{"effect":"allow","engine":"cedar","error_code":"","policy_ids":["files-delete-admin"],"reasons":[{"code":"policy_permit","message":"","policy_id":"files-delete-admin"}]}	\N		2026-07-19T06:00:05Z		sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a	2026-07-19T06:00:00Z	2026-07-19T06:00:00Z	0			
\.


--
-- Data for Name: callgate_meter_entries; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_meter_entries (meter, scope, at_ms, invocation_id, amount) FROM stdin;
\.


--
-- Data for Name: callgate_meter_reservations; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_meter_reservations (invocation_id, meter, scope, amount, at_ms, session_id, expires_ms, widths) FROM stdin;
inv_01a24e9ed0a957ce91fa2181ebc8f7e8	deletes	acmes:carol	1	1784440800000	ses_dcec806b2b6c450a8f15d08836adc5e8	1784441105000	[["1h", 3600000]]
\.


--
-- Data for Name: callgate_meter_totals; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_meter_totals (meter, scope, width_ms, total, through_ms) FROM stdin;
label:untrusted	acmex:ses_b9f8b08561b148118267a514a9d5b5a8ses_b9f8b08561b148118267a514a9d5b5a8	0	1	1784440800000
deletes	acmes:carol	3600000	0	1784437200000
\.


--
-- Data for Name: callgate_meter_unknown; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_meter_unknown (invocation_id, meter, scope, amount, at_ms, session_id, widths) FROM stdin;
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
inv_01a24e9ece85fefc8dcf2f15c9e875cc	ok	\\x7b22726f6c65223a22746f6f6c222c22746f6f6c5f63616c6c5f6964223a227731222c22636f6e74656e74223a7b2274797065223a22746f6f6c5f726573756c74222c22737461747573223a226f6b222c22746f6f6c223a22776561746865722e676574407631222c22696e766f636174696f6e5f6964223a22696e765f3031613234653965636538356665666338646366326631356339653837356363222c22636f6d6d69745f737461747573223a22434f4d4d4954544544222c226e6f6e6365223a22323062353263656138363638222c227472756e6361746564223a66616c73652c2264617461223a7b2273756d6d617279223a22e29fa6756e747275737465643a323062353263656138363638e29fa773756e6e79e29fa62f756e747275737465643a323062353263656138363638e29fa7227d7d7d	f	\\x		0	2026-07-19T06:00:00Z	20b52cea8668
\.


--
-- Data for Name: callgate_retention_marks; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_retention_marks (kind, updated_at, invocation_id) FROM stdin;
\.


--
-- Data for Name: callgate_schema_version; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_schema_version (version, name, applied_at) FROM stdin;
1	every record and the idempotency keys (one commit per answer)	2026-12-07 03:49:19.267168+00
2	deadline sweep index, tool messages fed into model calls, Authorize decisions	2026-12-07 03:49:19.267168+00
3	retention: deletable trails while purging, tombstones, age indexes	2026-12-07 03:49:19.267168+00
4	events: a new invocation's stage events as one packed row (no DDL: marks the format)	2026-12-07 03:49:19.267168+00
5	meters: reservations and bucketed totals (issue 30)	2026-12-07 03:49:19.267168+00
6	events: one B-tree (WITHOUT ROWID on SQLite), no event_id index; event_id and at left NULL when they are the invocation's; packed stages leave out the invocation's own values	2026-12-07 03:49:19.267168+00
7	meters: exact windows (per-call entries, running totals; issue 30)	2026-12-07 03:49:19.267168+00
\.


--
-- Data for Name: callgate_sessions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_sessions (session_id, tenant, subject, timezone, locale, budgets, tool_allowlist, opened_at) FROM stdin;
ses_b9f8b08561b148118267a514a9d5b5a8	acme	bob	Asia/Shanghai	en	{"max_external_cost_micros":0,"max_model_calls":50,"max_result_bytes":10485760,"max_tool_calls":100,"max_wall_clock_seconds":3600}	[]	2026-07-19T06:00:00Z
ses_74a2d0e69037435bbeea7144acc08651	acme	alice	Asia/Shanghai	en	{"max_external_cost_micros":0,"max_model_calls":50,"max_result_bytes":10485760,"max_tool_calls":100,"max_wall_clock_seconds":3600}	[]	2026-07-19T06:00:00Z
ses_dcec806b2b6c450a8f15d08836adc5e8	acme	carol	Asia/Shanghai	en	{"max_external_cost_micros":0,"max_model_calls":50,"max_result_bytes":10485760,"max_tool_calls":100,"max_wall_clock_seconds":3600}	[]	2026-07-19T06:00:00Z
\.


--
-- Data for Name: callgate_snapshots; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_snapshots (seq, revision, at, detail) FROM stdin;
1	sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a	2026-07-19T06:00:00Z	{"engine":"cedar","engine_revision":"sha256:c6986d02e9542c88ef71310b9536ecfce706be875a7403af81fe5a6f8eeeee31","tools":["calendar.create_event@v1","files.delete@v1","weather.get@v1"]}
\.


--
-- Data for Name: callgate_tool_views; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_tool_views (session_id, model_call_id, tools, spec_digests, tool_set_digest, created_at, seq) FROM stdin;
ses_b9f8b08561b148118267a514a9d5b5a8	mc-1	["weather.get@v1"]	{"hidden_by_policy":"sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a","weather.get@v1":"sha256:34c9c8095f57728bdb5b1a11748a9493662c30ab3cb9bf6f0acf27dc05a16af8"}	sha256:f7de3e1e4ebde5e3189c423a7e8d638335793fe8ef5f6b4936c97ae5c54a1f59	2026-07-19T06:00:00Z	1
ses_74a2d0e69037435bbeea7144acc08651	mc-1	["calendar.create_event@v1","weather.get@v1"]	{"calendar.create_event@v1":"sha256:517b181b122357f28ec462a67f123b68150bf643c1051bac57a272937ae74c73","hidden_by_policy":"sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a","weather.get@v1":"sha256:34c9c8095f57728bdb5b1a11748a9493662c30ab3cb9bf6f0acf27dc05a16af8"}	sha256:26917a382e694fe659e18647a58a8e74aabe0fc482d1509c1073214fba50cd71	2026-07-19T06:00:00Z	2
ses_dcec806b2b6c450a8f15d08836adc5e8	mc-1	["files.delete@v1","weather.get@v1"]	{"files.delete@v1":"sha256:e5335332a6e11ee627d4da570092903c05023267b93d693e5adf4ce824c6203f","hidden_by_policy":"sha256:00d811dd6fa198c96729df1aa50316295b521a600763463b14efe3adafff725a","weather.get@v1":"sha256:34c9c8095f57728bdb5b1a11748a9493662c30ab3cb9bf6f0acf27dc05a16af8"}	sha256:a4e9e06a8be3b94948f4bcb271e14b35bff09f72fc80a44286514e2df05c23e0	2026-07-19T06:00:00Z	3
\.


--
-- Data for Name: callgate_usage; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.callgate_usage (session_id, model_calls, tool_calls, result_bytes, cost_micros) FROM stdin;
ses_b9f8b08561b148118267a514a9d5b5a8	1	2	314	0
ses_74a2d0e69037435bbeea7144acc08651	1	4	0	0
ses_dcec806b2b6c450a8f15d08836adc5e8	1	1	0	0
\.


--
-- Name: callgate_fed_results_seq_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.callgate_fed_results_seq_seq', 1, false);


--
-- Name: callgate_snapshots_seq_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.callgate_snapshots_seq_seq', 1, true);


--
-- Name: callgate_tool_views_seq_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.callgate_tool_views_seq_seq', 3, true);


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
-- Name: callgate_events callgate_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_events
    ADD CONSTRAINT callgate_events_pkey PRIMARY KEY (invocation_id, seq);


--
-- Name: callgate_expired_invocations callgate_expired_invocations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_expired_invocations
    ADD CONSTRAINT callgate_expired_invocations_pkey PRIMARY KEY (invocation_id);


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
-- Name: callgate_meter_entries callgate_meter_entries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_meter_entries
    ADD CONSTRAINT callgate_meter_entries_pkey PRIMARY KEY (meter, scope, at_ms, invocation_id);


--
-- Name: callgate_meter_reservations callgate_meter_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_meter_reservations
    ADD CONSTRAINT callgate_meter_reservations_pkey PRIMARY KEY (invocation_id, meter);


--
-- Name: callgate_meter_totals callgate_meter_totals_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_meter_totals
    ADD CONSTRAINT callgate_meter_totals_pkey PRIMARY KEY (meter, scope, width_ms);


--
-- Name: callgate_meter_unknown callgate_meter_unknown_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_meter_unknown
    ADD CONSTRAINT callgate_meter_unknown_pkey PRIMARY KEY (invocation_id, meter);


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
-- Name: callgate_retention_marks callgate_retention_marks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.callgate_retention_marks
    ADD CONSTRAINT callgate_retention_marks_pkey PRIMARY KEY (kind);


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
-- Name: callgate_decisions_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_decisions_at ON public.callgate_decisions USING btree (at);


--
-- Name: callgate_expired_invocations_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_expired_invocations_at ON public.callgate_expired_invocations USING btree (expired_at);


--
-- Name: callgate_idempotency_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_idempotency_expires ON public.callgate_idempotency USING btree (expires_at);


--
-- Name: callgate_idempotency_invocation; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_idempotency_invocation ON public.callgate_idempotency USING btree (invocation_id);


--
-- Name: callgate_invocations_ended; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_invocations_ended ON public.callgate_invocations USING btree (updated_at) WHERE (state = ANY (ARRAY['AUTHORIZATION_REJECTED'::text, 'CANCELLED_BEFORE_COMMIT'::text, 'FAILED_AFTER_COMMIT'::text, 'FAILED_BEFORE_COMMIT'::text, 'OBSERVED'::text, 'PARSE_REJECTED'::text, 'VALIDATION_REJECTED'::text]));


--
-- Name: callgate_invocations_open_deadline; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_invocations_open_deadline ON public.callgate_invocations USING btree (deadline) WHERE (state = ANY (ARRAY['AUTHORIZED'::text, 'PREPARED'::text]));


--
-- Name: callgate_invocations_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_invocations_pending ON public.callgate_invocations USING btree (state, tenant) WHERE (confirmation_expires_at <> ''::text);


--
-- Name: callgate_meter_reservations_scope; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_meter_reservations_scope ON public.callgate_meter_reservations USING btree (meter, scope);


--
-- Name: callgate_meter_totals_scope; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX callgate_meter_totals_scope ON public.callgate_meter_totals USING btree (scope, width_ms);


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

\unrestrict zaccafaiL8fFFmuDPglJ6QRMoWpr2RS61C2jCh6KcR8oqBPCWgSOJcuMpcsiN1W

