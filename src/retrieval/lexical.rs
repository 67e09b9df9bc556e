//! BM25 over the knowledge base with tantivy, in process: one field per
//! `analyzers::Field`, each read by its analyzer.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Context};
use tantivy::collector::TopDocs;
use tantivy::directory::MmapDirectory;
use tantivy::indexer::{LogMergePolicy, NoMergePolicy};
use tantivy::query::{Bm25StatisticsProvider, BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, STORED, STRING,
};
use tantivy::{
    DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term,
};

use super::analyzers::{self, Analyzers};
use super::{Hit, KnowledgeChunk, Lang, LexicalIndex};

/// Largest index (in chunks, deleted ones included) merged into one segment after
/// ingestion: about half a second of merging at most (`cargo bench --bench retrieval`).
const MERGE_ALL_UP_TO_DOCS: u64 = 50_000;

/// Memory the writer may use before it flushes a segment.
const WRITER_BUDGET: usize = 64 * 1024 * 1024;

#[derive(Clone, Copy)]
struct Fields {
    chunk_id: Field,
    source_file: Field,
    doc_type: Field,
    /// One per `analyzers::Field`, in the order of `analyzers::Field::ALL`; `None` for a
    /// field the index was made without (`defines`, in an index older than it: its
    /// queries skip the field until `ingest --rebuild`).
    text: [Option<Field>; 6],
    payload: Field,
}

impl Fields {
    fn text(&self, field: analyzers::Field) -> Option<Field> {
        let at = analyzers::Field::ALL.iter().position(|f| *f == field)?;
        self.text[at]
    }

    /// The fields of `schema`, by name.
    fn of(schema: &Schema) -> anyhow::Result<Self> {
        let named = |name: &str| {
            schema.get_field(name).map_err(|_| {
                anyhow!("the lexical index has no field {name}: re-ingest with --rebuild")
            })
        };
        let text = analyzers::Field::ALL.map(|f| schema.get_field(f.name()).ok());
        if let Some(missing) = analyzers::Field::ALL
            .iter()
            .zip(&text)
            .find(|(f, found)| found.is_none() && **f != analyzers::Field::Defines)
        {
            named(missing.0.name())?;
        }
        Ok(Self {
            chunk_id: named("chunk_id")?,
            source_file: named("source_file")?,
            doc_type: named("doc_type")?,
            text,
            payload: named("payload")?,
        })
    }
}

pub struct TantivyIndex {
    index: Index,
    reader: IndexReader,
    /// `None` when opened for reading only (the gateway, while `ingest` writes).
    writer: Option<Mutex<WriterSlot>>,
    fields: Fields,
    chunks: Mutex<ChunkCache>,
    analyzers: Analyzers,
}

/// Chunks read from stored documents, by their address in the index as one searcher
/// generation sees it. A query reads every candidate's stored document (`candidates`, 40
/// by default) and most are the same from one query to the next; decompressing and
/// decoding them was the larger part of a BM25 query's time.
#[derive(Default)]
struct ChunkCache {
    generation: u64,
    /// foldhash, not SipHash: tens of lookups a search, by addresses no caller chooses.
    chunks: HashMap<DocAddress, Arc<KnowledgeChunk>, foldhash::fast::RandomState>,
}

/// The index's one writer. Empty only while `optimize` has closed it to let tantivy's
/// own merges finish, or when opening it again failed (then every write says so).
type WriterSlot = Option<IndexWriter<TantivyDocument>>;

/// Most chunks kept decoded; past it the cache starts over.
const CACHED_CHUNKS: usize = 4096;

fn schema() -> Schema {
    let text = |tokenizer: &str| {
        TextOptions::default().set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(tokenizer)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        )
    };
    let mut b = Schema::builder();
    // Fields are found by name; new ones go last, so an older index's fields keep their
    // places.
    b.add_text_field("chunk_id", STRING | STORED);
    b.add_text_field("source_file", STRING | STORED);
    b.add_text_field("doc_type", STRING | STORED);
    let (older, newer): (Vec<_>, Vec<_>) = analyzers::Field::ALL
        .into_iter()
        .partition(|f| *f != analyzers::Field::Defines);
    for f in older {
        b.add_text_field(f.name(), text(f.analyzer()));
    }
    b.add_text_field("payload", STORED);
    for f in newer {
        b.add_text_field(f.name(), text(f.analyzer()));
    }
    b.build()
}

impl TantivyIndex {
    /// Opens the index in `dir` for writing, creating it (and the folder) when missing.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let index = Self::open_index(dir)?;
        Self::with_index(index, true)
    }

    /// Opens the index in `dir` for searching only; it follows what a writer in another
    /// process commits. Creates an empty index when there is none yet.
    pub fn open_read_only(dir: &Path) -> anyhow::Result<Self> {
        let index = Self::open_index(dir)?;
        Self::with_index(index, false)
    }

    fn open_index(dir: &Path) -> anyhow::Result<Index> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the lexical index folder {}", dir.display()))?;
        let directory = MmapDirectory::open(dir)
            .with_context(|| format!("cannot open the lexical index in {}", dir.display()))?;
        // An index made before a field was added opens with the fields it has.
        let index = if Index::exists(&directory)? {
            Index::open(directory)
        } else {
            Index::create(directory, schema(), tantivy::IndexSettings::default())
        };
        index.with_context(|| format!("the lexical index in {} is unusable", dir.display()))
    }

    /// An index that lives in memory only (tests, tools).
    pub fn in_memory() -> anyhow::Result<Self> {
        Self::with_index(Index::create_in_ram(schema()), true)
    }

    fn with_index(index: Index, writable: bool) -> anyhow::Result<Self> {
        let analyzers = Analyzers::new()?;
        analyzers.register(&index)?;
        let fields = Fields::of(&index.schema())?;
        if fields.text(analyzers::Field::Defines).is_none() {
            tracing::info!(
                "the lexical index predates definitions by name: `ingest --rebuild` adds them"
            );
        }
        let writer = if writable {
            Some(Mutex::new(Some(index.writer(WRITER_BUDGET)?)))
        } else {
            None
        };
        let policy = if writable {
            ReloadPolicy::Manual
        } else {
            ReloadPolicy::OnCommitWithDelay
        };
        let reader = index.reader_builder().reload_policy(policy).try_into()?;
        Ok(Self {
            index,
            reader,
            writer,
            fields,
            chunks: Mutex::default(),
            analyzers,
        })
    }

    fn document(&self, chunk: &KnowledgeChunk) -> anyhow::Result<TantivyDocument> {
        let f = &self.fields;
        let mut doc = TantivyDocument::default();
        doc.add_text(f.chunk_id, &chunk.chunk_id);
        doc.add_text(f.source_file, &chunk.source_file);
        doc.add_text(f.doc_type, chunk.doc_type.as_str());
        for field in analyzers::Field::ALL {
            if let Some(at) = f.text(field) {
                doc.add_text(at, field.text(chunk));
            }
        }
        doc.add_text(f.payload, serde_json::to_string(chunk)?);
        Ok(doc)
    }

    /// Runs `change` on the writer and commits, or rolls back on error.
    fn write(
        &self,
        change: impl FnOnce(&mut IndexWriter<TantivyDocument>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut slot = self.writer_slot()?;
        let writer = slot.as_mut().ok_or_else(|| {
            anyhow!("the lexical index writer could not be reopened after a merge")
        })?;
        if let Err(e) = change(writer) {
            writer.rollback()?;
            return Err(e);
        }
        writer.commit()?;
        self.reader.reload()?;
        Ok(())
    }

    fn writer_slot(&self) -> anyhow::Result<std::sync::MutexGuard<'_, WriterSlot>> {
        self.writer
            .as_ref()
            .ok_or_else(|| anyhow!("the lexical index is open for reading only"))?
            .lock()
            .map_err(|_| anyhow!("the lexical index writer was poisoned by a panic"))
    }

    /// The chunk stored at `address`, decoded once per searcher generation.
    fn decoded(
        &self,
        searcher: &Searcher,
        address: DocAddress,
    ) -> anyhow::Result<Arc<KnowledgeChunk>> {
        let generation = searcher.generation().generation_id();
        {
            let mut cache = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
            if cache.generation != generation {
                cache.generation = generation;
                cache.chunks.clear();
            }
            if let Some(chunk) = cache.chunks.get(&address) {
                return Ok(chunk.clone());
            }
        }
        let doc: TantivyDocument = searcher.doc(address)?;
        let payload = doc
            .get_first(self.fields.payload)
            .and_then(|v| v.as_str())
            .ok_or_else(|| anyhow!("a lexical index entry has no payload"))?;
        let chunk = Arc::new(serde_json::from_str::<KnowledgeChunk>(payload)?);
        let mut cache = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        if cache.generation == generation {
            if cache.chunks.len() >= CACHED_CHUNKS {
                cache.chunks.clear();
            }
            cache.chunks.insert(address, chunk.clone());
        }
        Ok(chunk)
    }
}

/// BM25's statistics for one search, with the document frequencies the search already
/// looked up: tantivy would look each up again in the term dictionary (about a thousand
/// instructions a term), with the same answer from the same searcher.
struct KnownFrequencies<'a> {
    searcher: &'a Searcher,
    /// A map, not a list: a long question has hundreds of terms, each asked for once.
    found: HashMap<Term, u64, foldhash::fast::RandomState>,
}

impl Bm25StatisticsProvider for KnownFrequencies<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        self.searcher.total_num_tokens(field)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        self.searcher.total_num_docs()
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        match self.found.get(term) {
            Some(frequency) => Ok(*frequency),
            None => self.searcher.doc_freq(term),
        }
    }
}

impl LexicalIndex for TantivyIndex {
    fn replace_files(&self, files: &[(String, Vec<KnowledgeChunk>)]) -> anyhow::Result<()> {
        let docs = files
            .iter()
            .flat_map(|(_, chunks)| chunks.iter().map(|c| self.document(c)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let source = self.fields.source_file;
        self.write(|w| {
            for (file, _) in files {
                w.delete_term(Term::from_field_text(source, file));
            }
            for doc in docs {
                w.add_document(doc)?;
            }
            Ok(())
        })
    }

    fn remove_files(&self, files: &[String]) -> anyhow::Result<()> {
        let source = self.fields.source_file;
        self.write(|w| {
            for file in files {
                w.delete_term(Term::from_field_text(source, file));
            }
            Ok(())
        })
    }

    fn search(&self, query: &str, lang: Lang, top_n: usize) -> anyhow::Result<Vec<Hit>> {
        let searcher = self.reader.searcher();
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        let mut known = KnownFrequencies {
            searcher: &searcher,
            found: HashMap::default(),
        };
        for wanted in self.analyzers.query_terms(query, lang)? {
            let Some(field) = self.fields.text(wanted.field) else {
                continue;
            };
            let term = Term::from_field_text(field, &wanted.term);
            // Terms no chunk has are left out: each clause costs a weight and a scorer
            // per segment, found or not.
            let frequency = searcher.doc_freq(&term)?;
            if frequency > 0 {
                known.found.insert(term.clone(), frequency);
                let q = TermQuery::new(term, IndexRecordOption::WithFreqs);
                let boosted = BoostQuery::new(Box::new(q), wanted.boost);
                clauses.push((Occur::Should, Box::new(boosted)));
            }
        }
        if clauses.is_empty() || top_n == 0 {
            return Ok(Vec::new());
        }
        let top = searcher.search_with_statistics_provider(
            &BooleanQuery::new(clauses),
            &TopDocs::with_limit(top_n).order_by_score(),
            &known,
        )?;
        top.into_iter()
            .map(|(score, address)| {
                Ok(Hit {
                    chunk: self.decoded(&searcher, address)?,
                    score,
                })
            })
            .collect()
    }

    fn chunk(&self, chunk_id: &str) -> anyhow::Result<Option<Arc<KnowledgeChunk>>> {
        let searcher = self.reader.searcher();
        let query = TermQuery::new(
            Term::from_field_text(self.fields.chunk_id, chunk_id),
            IndexRecordOption::Basic,
        );
        let top = searcher.search(&query, &TopDocs::with_limit(1).order_by_score())?;
        top.first()
            .map(|(_, address)| self.decoded(&searcher, *address))
            .transpose()
    }

    fn len(&self) -> anyhow::Result<u64> {
        Ok(self.reader.searcher().num_docs())
    }

    /// Merges every segment into one when the index is small enough to merge at once
    /// (each commit and each indexing thread leaves a segment, and a search pays for
    /// every term in every segment: on `examples/knowledge`, 36 µs a search in one
    /// segment against 49 µs in two). Larger indexes are left to tantivy's merge policy.
    ///
    /// tantivy's merge policy runs merges of its own in the background after every
    /// commit, and an explicit merge of segments it is already merging fails at the end
    /// ("segments … could not be found in the SegmentManager"): a large first ingest
    /// always met one. So the writer is closed first, which waits for every merge it
    /// started (and the merges those lead to), then opened again with no merge policy
    /// for the one merge of everything, and given the default policy back.
    fn optimize(&self) -> anyhow::Result<()> {
        if self.writer.is_none() {
            return Ok(());
        }
        let mut slot = self.writer_slot()?;
        if let Some(writer) = slot.take() {
            writer
                .wait_merging_threads()
                .context("waiting for the lexical index's background merges")?;
        }
        let writer = slot.insert(
            self.index
                .writer(WRITER_BUDGET)
                .context("reopening the lexical index writer")?,
        );
        let segments = self.index.searchable_segment_metas()?;
        let docs: u64 = segments.iter().map(|s| u64::from(s.max_doc())).sum();
        if segments.len() >= 2 && docs <= MERGE_ALL_UP_TO_DOCS {
            let ids: Vec<_> = segments.iter().map(|s| s.id()).collect();
            writer.set_merge_policy(Box::new(NoMergePolicy));
            let merged = writer.merge(&ids).wait();
            writer.set_merge_policy(Box::<LogMergePolicy>::default());
            merged.context("merging the lexical index's segments")?;
        }
        drop(slot);
        self.reader.reload()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::DocType;

    fn chunk(id: &str, file: &str, doc_type: DocType, section: &str, text: &str) -> KnowledgeChunk {
        KnowledgeChunk {
            chunk_id: id.into(),
            source_file: file.into(),
            start_line: 1,
            end_line: text.lines().count().max(1),
            doc_type,
            block_type: "section".into(),
            section: section.into(),
            language: "en".into(),
            text: text.into(),
            defines: Vec::new(),
        }
    }

    fn corpus() -> Vec<(String, Vec<KnowledgeChunk>)> {
        vec![
            (
                "docs/variables.es.md".into(),
                vec![chunk(
                    "es-1",
                    "docs/variables.es.md",
                    DocType::Narrative,
                    "Variables > Declaración",
                    "Las variables se declaran con la palabra reservada let. Cada declaración \
                     crea un enlace nuevo que puede ocultar a los anteriores.",
                )],
            ),
            (
                "docs/variables.en.md".into(),
                vec![chunk(
                    "en-1",
                    "docs/variables.en.md",
                    DocType::Narrative,
                    "Variables > Declaring",
                    "Variables are declared with the let keyword. Each declaration creates a \
                     new binding that may shadow earlier ones.",
                )],
            ),
            (
                "src/users.rs".into(),
                vec![chunk(
                    "code-1",
                    "src/users.rs",
                    DocType::Code,
                    "",
                    "pub fn getUserName(id: u64) -> String { lookup_display_name(id) }",
                )],
            ),
        ]
    }

    fn ids(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| h.chunk.chunk_id.as_str()).collect()
    }

    #[test]
    fn each_language_finds_the_page_in_both() {
        let index = TantivyIndex::in_memory().unwrap();
        index.replace_files(&corpus()).unwrap();
        assert_eq!(index.len().unwrap(), 3);
        // Through the glossary, a question finds the page written in either language;
        // which of two translations comes first is BM25's call (the vectors, when an
        // embedder runs, give the question's own language its lead).
        for (q, lang) in [
            ("¿cómo se declaran las variables?", Lang::Es),
            ("how are variables declared", Lang::En),
        ] {
            let found = index.search(q, lang, 3).unwrap();
            let mut first_two = ids(&found)[..2].to_vec();
            first_two.sort_unstable();
            assert_eq!(first_two, ["en-1", "es-1"], "{q}: {found:?}");
        }
        // Stemming and accent folding: "declaración" and "declaracion" meet.
        let folded = index.search("declaracion", Lang::Es, 3).unwrap();
        assert!(ids(&folded).contains(&"es-1"), "{folded:?}");
    }

    #[test]
    fn a_spanish_question_finds_an_english_page_through_the_glossary() {
        let index = TantivyIndex::in_memory().unwrap();
        let mut files = corpus();
        files.push((
            "man/rmdir.1".into(),
            vec![chunk(
                "rmdir",
                "man/rmdir.1",
                DocType::Narrative,
                "RMDIR(1) > NAME",
                "rmdir - remove empty directories. Remove the DIRECTORY, if it is empty.",
            )],
        ));
        index.replace_files(&files).unwrap();
        let hits = index
            .search("¿cómo elimino una carpeta vacía?", Lang::Es, 3)
            .unwrap();
        assert_eq!(ids(&hits).first(), Some(&"rmdir"), "{:?}", ids(&hits));
    }

    #[test]
    fn identifiers_are_found_by_their_words() {
        let index = TantivyIndex::in_memory().unwrap();
        index.replace_files(&corpus()).unwrap();
        for q in ["user name", "getUserName", "display name lookup"] {
            let hits = index.search(q, Lang::En, 3).unwrap();
            assert_eq!(ids(&hits)[0], "code-1", "{q}: {hits:?}");
        }
        let hit = &index.search("user name", Lang::En, 1).unwrap()[0];
        assert_eq!(hit.chunk.doc_type, DocType::Code);
        assert_eq!(hit.chunk.source_file, "src/users.rs");
    }

    #[test]
    fn a_questions_function_words_do_not_find_prose_through_the_code_field() {
        let mut files = corpus();
        // Spanish prose dense with function words ("de", "la", "que", "el"), none of the
        // question's own terms.
        files.push((
            "docs/notas.es.md".into(),
            vec![chunk(
                "es-notes",
                "docs/notas.es.md",
                DocType::Narrative,
                "Notas",
                "La mayor parte de los cambios de la versión son de la documentación y de la \
                 traducción que el equipo de la casa hace en el mes de mayo de cada año.",
            )],
        ));
        files.push((
            "src/loop.py".into(),
            vec![chunk(
                "code-loop",
                "src/loop.py",
                DocType::Code,
                "",
                "for x in items:\n    if not x: continue",
            )],
        ));
        let index = TantivyIndex::in_memory().unwrap();
        index.replace_files(&files).unwrap();
        let q = "¿Qué devuelve getUserName si el id no es de la base de datos?";
        let hits = index.search(q, Lang::Es, 4).unwrap();
        assert_eq!(ids(&hits), ["code-1"], "{hits:?}");
        // English function words stay: they are code keywords too (all of this question
        // is English stop words).
        let hits = index.search("for in if not", Lang::En, 4).unwrap();
        assert_eq!(ids(&hits), ["code-loop"], "{hits:?}");
    }

    /// Chunks are decoded once per searcher generation: a search after a change reads
    /// what the index holds now, never a chunk decoded before it.
    #[test]
    fn a_search_after_a_change_reads_the_changed_chunks() {
        let index = TantivyIndex::in_memory().unwrap();
        let version = |text: &str| {
            vec![(
                "docs/variables.en.md".to_string(),
                vec![chunk(
                    "en-2",
                    "docs/variables.en.md",
                    DocType::Narrative,
                    "Variables > Constants",
                    text,
                )],
            )]
        };
        for text in [
            "Constants are declared with const.",
            "Constants are declared with let const, now.",
            "Constants: const, once more.",
        ] {
            index.replace_files(&version(text)).unwrap();
            for _ in 0..2 {
                let hits = index.search("constants const", Lang::En, 5).unwrap();
                assert_eq!(hits.len(), 1);
                assert_eq!(hits[0].chunk.text, text);
            }
        }
    }

    /// Merging the segments changes no result: the same chunks, the same scores, after
    /// a change too; terms no chunk has (the joined words) change nothing either.
    #[test]
    fn optimize_merges_segments_and_keeps_every_result() {
        let index = TantivyIndex::in_memory().unwrap();
        let files = corpus();
        for file in &files {
            index.replace_files(std::slice::from_ref(file)).unwrap();
        }
        let segments = || index.reader.searcher().segment_readers().len();
        assert!(segments() > 1, "one commit per file");
        let queries = [
            ("how are variables declared", Lang::En),
            ("get user name", Lang::En),
            ("¿cómo se declaran las variables?", Lang::Es),
            ("zzzunknown qqqnothing", Lang::En),
        ];
        let results = || {
            queries
                .iter()
                .map(|(q, lang)| {
                    index
                        .search(q, *lang, 10)
                        .unwrap()
                        .into_iter()
                        .map(|h| (h.chunk.chunk_id.clone(), h.score))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        let before = results();
        assert!(before[0].len() >= 2 && before[3].is_empty(), "{before:?}");
        index.optimize().unwrap();
        assert_eq!(segments(), 1);
        let after = results();
        assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(&after) {
            let ids =
                |r: &Vec<(String, f32)>| r.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(b), ids(a));
            for ((_, sb), (_, sa)) in b.iter().zip(a) {
                assert!((sb - sa).abs() < 1e-4, "{sb} vs {sa}");
            }
        }
        assert_eq!(
            index.len().unwrap(),
            files.iter().map(|(_, c)| c.len() as u64).sum::<u64>()
        );
    }

    #[test]
    fn replacing_and_removing_files_persists() {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = TantivyIndex::open(dir.path()).unwrap();
            index.replace_files(&corpus()).unwrap();
            let edited = chunk(
                "en-2",
                "docs/variables.en.md",
                DocType::Narrative,
                "Variables > Constants",
                "Constants are declared with const and never change.",
            );
            index
                .replace_files(&[("docs/variables.en.md".into(), vec![edited])])
                .unwrap();
            index.remove_files(&["src/users.rs".into()]).unwrap();
        }
        let index = TantivyIndex::open(dir.path()).unwrap();
        assert_eq!(
            index.len().unwrap(),
            2,
            "the edited file's old chunk and the deleted file are gone"
        );
        assert!(index
            .search("shadow binding", Lang::En, 5)
            .unwrap()
            .iter()
            .all(|h| h.chunk.chunk_id != "en-1"));
        assert_eq!(
            ids(&index.search("constants const", Lang::En, 5).unwrap()),
            ["en-2"]
        );
        assert!(index.search("user name", Lang::En, 5).unwrap().is_empty());
        assert!(index.search("   ", Lang::En, 5).unwrap().is_empty());
    }

    /// An index written before chunks carried their defined names (no `defines` field)
    /// opens, takes new chunks and answers; only the lookup by name waits for a rebuild.
    #[test]
    fn an_index_from_before_definitions_by_name_still_serves() {
        let dir = tempfile::tempdir().unwrap();
        {
            let text = TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer("assist_en")
                    .set_index_option(IndexRecordOption::WithFreqsAndPositions),
            );
            let mut b = Schema::builder();
            for name in ["chunk_id", "source_file", "doc_type"] {
                b.add_text_field(name, STRING | STORED);
            }
            for name in ["section_en", "section_es", "body_en", "body_es", "code"] {
                b.add_text_field(name, text.clone());
            }
            b.add_text_field("payload", STORED);
            let directory = MmapDirectory::open(dir.path()).unwrap();
            Index::create(directory, b.build(), tantivy::IndexSettings::default()).unwrap();
        }
        let index = TantivyIndex::open(dir.path()).unwrap();
        let mut code = chunk(
            "py-1",
            "client.py",
            DocType::Code,
            "def retry_with_backoff(call)",
            "def retry_with_backoff(call):\n    return call()",
        );
        code.defines = vec!["retry_with_backoff".into()];
        index
            .replace_files(&[("client.py".into(), vec![code])])
            .unwrap();
        let found = index
            .search("what does retry_with_backoff return?", Lang::En, 5)
            .unwrap();
        assert_eq!(ids(&found), ["py-1"]);
        // A fresh index has the field, and the name alone finds the definition there.
        let fresh = TantivyIndex::in_memory().unwrap();
        assert!(fresh.fields.text(analyzers::Field::Defines).is_some());
        assert!(index.fields.text(analyzers::Field::Defines).is_none());
    }
}
