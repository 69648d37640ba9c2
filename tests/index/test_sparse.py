from citewise.index.sparse import Bm25Encoder


def test_alert_names_match_whole_and_by_parts():
    enc = Bm25Encoder()
    terms = enc.terms("CheckoutAPIHighLatencyP99 fired")
    assert "checkoutapihighlatencyp99" in terms
    assert {"checkout", "api", "high", "latenc"} <= set(terms)


def test_stop_words_dropped_and_words_stemmed():
    enc = Bm25Encoder()
    assert enc.terms("How do I restart the replicas") == ["restart", "replica"]


def test_document_vector_saturates_term_frequency():
    enc = Bm25Encoder()
    once = enc.embed_document("redis")
    many = enc.embed_document("redis redis redis redis redis redis")
    assert once.indices == many.indices
    assert many.values[0] > once.values[0]
    assert many.values[0] < enc.k1 + 1  # BM25's saturation bound
    q = enc.embed_query("redis redis failover")
    assert len(q.indices) == 2 and set(q.values) == {1.0}
